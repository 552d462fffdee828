//! Operations over real HTTP: JSON logs on stdout with one access-log line per request,
//! request ids, and upstream's host deny list.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Server, client, elf_request};
use serde_json::{Value, json};

#[tokio::test]
async fn json_logs_go_to_stdout_with_an_access_line_per_request() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yml");
    std::fs::write(
        &config,
        format!(
            "bind: 127.0.0.1:0\ncache_dir: {}\nlogging:\n  format: json\n  level: info\n",
            dir.path().join("cache").display()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_omnisym"))
        .args(["run", "-c"])
        .arg(&config)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    let url = first
        .trim()
        .strip_prefix("omnisym listening on ")
        .unwrap_or_else(|| panic!("{first}"))
        .to_owned();

    let response = client()
        .get(format!("{url}/healthcheck"))
        .header("x-request-id", "trace-42")
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-request-id"], "trace-42");
    // An id unfit for a log line is replaced, not echoed.
    let response = client()
        .get(format!("{url}/healthcheck"))
        .header("x-request-id", "two words")
        .send()
        .await
        .unwrap();
    let replaced = response.headers()["x-request-id"].to_str().unwrap();
    assert!(
        replaced != "two words" && replaced.len() >= 16,
        "{replaced}"
    );
    let response = client()
        .post(format!("{url}/symbolicate"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let generated = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(generated.len() >= 16, "{generated}");

    let mut access = Vec::new();
    while access.len() < 3 {
        let line = lines_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("an access-log line on stdout");
        let record: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        if record["target"] == "omnisym::access" {
            access.push(record);
        }
    }
    let health = &access[0]["fields"];
    assert_eq!(health["method"], "GET");
    assert_eq!(health["path"], "/healthcheck");
    assert_eq!(health["status"], 200);
    assert_eq!(health["request_id"], "trace-42");
    assert!(health["duration_ms"].as_f64().unwrap() >= 0.0);
    assert_eq!(access[0]["level"], "INFO");
    assert_ne!(access[1]["fields"]["request_id"], "two words");
    let bad = &access[2]["fields"];
    assert_eq!(bad["path"], "/symbolicate");
    assert_eq!(bad["status"], 400);
    assert_eq!(bad["request_id"], generated.as_str());
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test]
async fn a_failing_host_is_blocked_after_the_threshold() {
    // Nothing listens on this port: every download from it fails.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = Server::start(
        "deny_list_threshold: 2\ndeny_list_time_window: 1m\ndeny_list_bucket_size: 1s\ndeny_list_block_time: 1h\n",
    );
    let source = json!([{
        "type": "http", "id": "dead", "url": format!("http://127.0.0.1:{port}/"),
        "layout": {"type": "native"},
    }]);
    let (status, first) = server
        .post("/symbolicate", &elf_request(source.clone()))
        .await;
    assert_eq!(status, 200, "{first}");
    let details = |response: &Value| -> Vec<String> {
        response["modules"][0]["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["download"]["details"].as_str().unwrap_or("").to_owned())
            .collect()
    };
    // The host was asked until it had failed twice.
    let refused = details(&first)
        .iter()
        .filter(|d| !d.contains("temporarily blocked"))
        .count();
    assert!(refused >= 2, "{first:#}");
    // Another scope, so no cached answer stands in for the downloads.
    let (status, second) = server
        .post("/symbolicate?scope=other", &elf_request(source))
        .await;
    assert_eq!(status, 200, "{second}");
    // Now it is not asked at all.
    let details = details(&second);
    assert!(!details.is_empty());
    assert!(
        details.iter().all(|d| d.contains("temporarily blocked")),
        "{details:#?}"
    );
}
