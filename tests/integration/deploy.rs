//! The deployment artefacts under `deploy/`: the Kubernetes base, rendered by kubectl's
//! kustomize and validated against Kubernetes' own schemas (`kubernetes-validate`, from
//! PyPI), and the compose fleet, each checked for what a cluster needs of it and for
//! agreeing with omnisym's own reading of its config.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use omnisym::config::Config;
use omnisym::objstore::ObjectStoreConfig;
use serde_json::Value;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// What `kubectl kustomize deploy/kubernetes` renders, as the YAML documents it holds.
fn render_kubernetes() -> String {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(deploy_dir().join("kubernetes"))
        .output()
        .expect("kubectl runs (scripts/test.sh installs Debian's kubernetes-client)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Every document of a YAML stream, merge keys (`<<:`) applied.
fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(yaml)
        .map(|doc| {
            let mut value = <serde_yaml_ng::Value as serde::Deserialize>::deserialize(doc).unwrap();
            value.apply_merge().unwrap();
            serde_json::to_value(value).unwrap()
        })
        .collect()
}

fn one<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    let found: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .collect();
    assert_eq!(found.len(), 1, "one {kind} {name}");
    found[0]
}

/// A config as omnisym reads it, with its `${NAME}` placeholders given `values`.
fn config_with(text: &str, values: &[(&str, &str)]) -> Config {
    let mut text = text.to_owned();
    for (name, value) in values {
        text = text.replace(&format!("${{{name}}}"), value);
    }
    let unset = text
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .find(|line| line.contains("${"));
    assert_eq!(unset, None, "a placeholder without a value");
    let (config, ignored) = Config::from_yaml(&text).unwrap();
    assert!(
        ignored.is_empty(),
        "keys omnisym does not know: {ignored:?}"
    );
    config
}

/// A Kubernetes quantity of bytes (`1536Mi`, `20Gi`, `512M`, `1000`).
fn bytes(quantity: &Value) -> u64 {
    let text = quantity.as_str().expect("a quantity");
    let units = [
        ("Ki", 1u64 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("k", 1000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
    ];
    for (suffix, factor) in units {
        if let Some(number) = text.strip_suffix(suffix) {
            return number.parse::<u64>().unwrap() * factor;
        }
    }
    text.parse().unwrap()
}

fn secs(value: &Value) -> Duration {
    Duration::from_secs(value.as_u64().expect("seconds"))
}

#[test]
fn the_kubernetes_base_renders_and_validates_against_the_schemas() {
    let rendered = render_kubernetes();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rendered.yaml");
    std::fs::write(&file, &rendered).unwrap();
    let out = Command::new("kubernetes-validate")
        .args(["--strict", "--quiet"])
        .arg(&file)
        .output()
        .expect("kubernetes-validate runs (scripts/test.sh installs it from PyPI)");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let docs = documents(&rendered);
    let kinds: Vec<&str> = docs
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .map(|k| match k {
            "ConfigMap"
            | "Deployment"
            | "Service"
            | "HorizontalPodAutoscaler"
            | "PodDisruptionBudget" => k,
            other => panic!("unexpected kind {other}"),
        })
        .collect();
    assert_eq!(kinds.len(), 6, "{kinds:?}");
}

#[test]
fn the_kubernetes_base_has_what_a_fleet_needs() {
    let docs = documents(&render_kubernetes());
    let deployment = one(&docs, "Deployment", "omnisym");
    let pod = &deployment["spec"]["template"];
    let labels = pod["metadata"]["labels"].as_object().unwrap();
    let selects_pods = |selector: &Value| {
        let selector = selector.as_object().unwrap();
        assert!(!selector.is_empty());
        for (k, v) in selector {
            assert_eq!(labels.get(k), Some(v), "selector {k}={v} misses the pods");
        }
    };
    selects_pods(&deployment["spec"]["selector"]["matchLabels"]);
    let containers = pod["spec"]["containers"].as_array().unwrap();
    let server = containers.iter().find(|c| c["name"] == "omnisym").unwrap();
    let cleanup = containers.iter().find(|c| c["name"] == "cleanup").unwrap();

    // The config the pods mount parses, and is the one the server is started with.
    let volumes = pod["spec"]["volumes"].as_array().unwrap();
    let config_volume = volumes.iter().find(|v| v["configMap"].is_object()).unwrap();
    let config_map = one(
        &docs,
        "ConfigMap",
        config_volume["configMap"]["name"].as_str().unwrap(),
    );
    let mount = server["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == config_volume["name"])
        .unwrap();
    let config_path = format!("{}/config.yml", mount["mountPath"].as_str().unwrap());
    assert_eq!(
        server["args"],
        serde_json::json!(["run", "-c", config_path])
    );
    let config = config_with(
        config_map["data"]["config.yml"].as_str().unwrap(),
        &[
            ("AWS_ACCESS_KEY_ID", "key"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("OMNISYM_ADVERTISE_URL", "http://10.0.0.5:3021"),
        ],
    );

    // Each pod advertises its own address, at the port it serves.
    let port = server["ports"][0]["containerPort"].as_u64().unwrap();
    assert_eq!(u64::from(config.bind.port()), port);
    let env = server["env"].as_array().unwrap();
    let var = |name: &str| env.iter().find(|e| e["name"] == name).unwrap().clone();
    assert_eq!(
        var("POD_IP")["valueFrom"]["fieldRef"]["fieldPath"],
        "status.podIP"
    );
    assert_eq!(
        var("OMNISYM_ADVERTISE_URL")["value"],
        format!("http://$(POD_IP):{port}")
    );
    // Its peers are the headless Service's addresses, draining ones included.
    let peers_dns = config.fleet.peers_dns.as_deref().unwrap();
    let (host, peer_port) = peers_dns.rsplit_once(':').unwrap();
    let peers = one(&docs, "Service", host);
    assert_eq!(peers["spec"]["clusterIP"], "None");
    assert_eq!(peers["spec"]["publishNotReadyAddresses"], true);
    assert_eq!(
        peers["spec"]["ports"][0]["port"].as_u64(),
        peer_port.parse().ok()
    );
    selects_pods(&peers["spec"]["selector"]);
    selects_pods(&one(&docs, "Service", "omnisym")["spec"]["selector"]);
    // One shared store for the fleet.
    let shared = config.shared_cache.as_ref().expect("a shared cache");
    assert!(matches!(
        shared.backend,
        ObjectStoreConfig::S3(_) | ObjectStoreConfig::Gcs(_)
    ));

    // Draining: readiness is its own probe, and the grace period covers the drain.
    assert_eq!(server["readinessProbe"]["httpGet"]["path"], "/ready");
    assert_eq!(server["livenessProbe"]["httpGet"]["path"], "/healthcheck");
    assert!(config.drain_delay > Duration::ZERO);
    assert!(
        secs(&pod["spec"]["terminationGracePeriodSeconds"])
            > config.drain_delay + config.shutdown_timeout
    );

    // Resources from the memory budget, and a cache volume above the disk budget.
    let memory = &server["resources"];
    let budget = config.caches.in_memory.capacity + config.caches.conversion_budget;
    assert!(bytes(&memory["limits"]["memory"]) > budget, "{memory}");
    assert!(bytes(&memory["requests"]["memory"]) > budget, "{memory}");
    let cache_volume = volumes.iter().find(|v| v["emptyDir"].is_object()).unwrap();
    assert!(bytes(&cache_volume["emptyDir"]["sizeLimit"]) > config.caches.max_disk_size.unwrap());

    // The cleanup loop runs beside the server, on the same cache, and only there.
    assert_eq!(config.in_process_cleanup(), None);
    let args: Vec<&str> = cleanup["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(&args[..3], ["cleanup", "-c", config_path.as_str()]);
    assert!(args.contains(&"--repeat"), "{args:?}");
    let mounted = |c: &Value| {
        c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == cache_volume["name"])
            .map(|m| m["mountPath"].clone())
    };
    assert_eq!(mounted(cleanup), mounted(server));
    assert_eq!(
        mounted(server).unwrap().as_str().unwrap(),
        config.cache_dir.to_str().unwrap()
    );

    // Scaling and disruptions aim at these pods.
    let hpa = one(&docs, "HorizontalPodAutoscaler", "omnisym");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["kind"], "Deployment");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], "omnisym");
    assert!(hpa["spec"]["minReplicas"].as_u64().unwrap() >= 2);
    let pdb = one(&docs, "PodDisruptionBudget", "omnisym");
    selects_pods(&pdb["spec"]["selector"]["matchLabels"]);
}

#[test]
fn the_compose_fleet_agrees_with_its_config_and_balancer() {
    let dir = deploy_dir().join("compose");
    let compose = documents(&std::fs::read_to_string(dir.join("docker-compose.yml")).unwrap());
    let services = compose[0]["services"].as_object().unwrap();
    let replicas: Vec<(&String, &Value)> = services
        .iter()
        .filter(|(_, s)| s["image"] == "omnisym:latest")
        .collect();
    assert_eq!(replicas.len(), 3);
    let text = std::fs::read_to_string(dir.join("config.yml")).unwrap();
    let haproxy = std::fs::read_to_string(dir.join("haproxy.cfg")).unwrap();
    for (name, service) in &replicas {
        let env = &service["environment"];
        let advertised = env["OMNISYM_ADVERTISE_URL"].as_str().unwrap();
        let config = config_with(
            &text,
            &[
                (
                    "AWS_ACCESS_KEY_ID",
                    env["AWS_ACCESS_KEY_ID"].as_str().unwrap(),
                ),
                (
                    "AWS_SECRET_ACCESS_KEY",
                    env["AWS_SECRET_ACCESS_KEY"].as_str().unwrap(),
                ),
                ("OMNISYM_ADVERTISE_URL", advertised),
            ],
        );
        let url = config.fleet.advertise_url.as_ref().unwrap();
        assert_eq!(url.host_str(), Some(name.as_str()));
        assert_eq!(url.port(), Some(config.bind.port()));
        assert!(config.fleet.peers.contains(url), "{name} is not a peer");
        assert!(
            haproxy.contains(&format!("server {name} {name}:{}", config.bind.port())),
            "HAProxy does not balance to {name}"
        );
        assert!(config.shared_cache.is_some());
        assert!(config.drain_delay > Duration::ZERO);
        assert!(
            service["command"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a == "run")
        );
        let grace = service["stop_grace_period"].as_str().unwrap();
        let grace = Duration::from_secs(grace.trim_end_matches('s').parse().unwrap());
        assert!(grace > config.drain_delay + config.shutdown_timeout);
    }
    assert!(haproxy.contains("balance roundrobin"));
    assert!(haproxy.contains("option httpchk GET /ready"));
}
