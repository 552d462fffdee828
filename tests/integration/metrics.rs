//! Metrics end to end: the real server with `metrics.statsd` pointed at a UDP socket
//! of the test's own, and `GET /metrics` read as Prometheus text after real requests.

use crate::common;

use std::time::{Duration, Instant};

use common::prometheus::Exposition;
use common::{Server, SymbolServer, assert_elf_symbolicated, elf_debug_file, elf_request};
use serde_json::json;

/// Every StatsD line received until they satisfy `done` or `within` has passed.
async fn receive_until(
    socket: &tokio::net::UdpSocket,
    within: Duration,
    done: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + within;
    let mut lines = Vec::new();
    let mut buf = vec![0u8; 65536];
    while Instant::now() < deadline {
        let wait = deadline.saturating_duration_since(Instant::now());
        let Ok(Ok(n)) = tokio::time::timeout(wait, socket.recv(&mut buf)).await else {
            break;
        };
        let text = String::from_utf8(buf[..n].to_vec()).expect("StatsD lines are UTF-8");
        lines.extend(text.lines().map(str::to_owned));
        if done(&lines) {
            break;
        }
    }
    lines
}

/// The tags of a DogStatsD line (`name:value|type|#k:v,k:v`).
fn tags(line: &str) -> Vec<&str> {
    line.split('|')
        .find_map(|part| part.strip_prefix('#'))
        .map(|tags| tags.split(',').collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn statsd_receives_every_metric_with_the_prefix_and_the_tags() {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let server = Server::start(&format!(
        "metrics:\n  statsd: {addr}\n  prefix: omnitest\n  hostname_tag: host\n  \
         custom_tags:\n    deployment: e2e\n"
    ));
    let (status, _) = server.get("/healthcheck").await;
    assert!(status.is_success());

    let is_request = |line: &str| {
        line.starts_with("omnitest.http.requests:1|c|")
            && tags(line).contains(&"endpoint:/healthcheck")
    };
    let is_latency = |line: &str| {
        line.starts_with("omnitest.http.request.duration_seconds:")
            && line.contains("|d|")
            && tags(line).contains(&"endpoint:/healthcheck")
    };
    // The exporter sends what it aggregated every few seconds, over several datagrams.
    let lines = receive_until(&socket, Duration::from_secs(20), |lines| {
        lines.iter().any(|l| is_request(l)) && lines.iter().any(|l| is_latency(l))
    })
    .await;
    let request = lines
        .iter()
        .find(|l| is_request(l))
        .unwrap_or_else(|| panic!("no request counter in {lines:#?}\n{}", server.log()));
    let request_tags = tags(request);
    assert!(request_tags.contains(&"status:200"), "{request}");
    assert!(request_tags.contains(&"deployment:e2e"), "{request}");
    assert!(
        request_tags
            .iter()
            .any(|t| t.starts_with("host:") && t.len() > 5),
        "{request}"
    );
    assert!(
        lines.iter().all(|l| l.starts_with("omnitest.")),
        "every metric carries the prefix: {lines:#?}"
    );
    assert!(
        lines.iter().any(|l| is_latency(l)),
        "the latency goes out as a distribution: {lines:#?}"
    );
}

#[tokio::test]
async fn an_unusable_statsd_address_only_costs_the_statsd_export() {
    let server = Server::start("metrics:\n  statsd: no-such-host.invalid:8125\n");
    let (status, _) = server.get("/healthcheck").await;
    assert!(status.is_success());
    assert!(
        server.log().contains("cannot send metrics to StatsD"),
        "{}",
        server.log()
    );
    let metrics = server.scrape().await;
    assert_eq!(
        metrics.get(
            "http_requests_total",
            &[("endpoint", "/healthcheck"), ("status", "200")]
        ),
        Some(1.0)
    );
}

/// A StatsD address that resolves but where nothing listens (a port typed wrong, or
/// self-hosted's default with no StatsD running) is reported, once: neither muted for
/// good nor repeated at every flush.
#[tokio::test]
async fn a_statsd_that_refuses_is_reported_once() {
    let closed = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let server = Server::start(&format!("metrics:\n  statsd: '{addr}'\n"));
    let failures = |log: &str| log.matches("Failed to send payload").count();
    // Each flush (every 3 s) sends what the requests counted; the refusals come back
    // on the sends after the first.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while failures(&server.log()) == 0 && std::time::Instant::now() < deadline {
        server.get("/healthcheck").await;
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    assert_eq!(failures(&server.log()), 1, "{}", server.log());
    // Three more flushes with more to send: still the one report.
    for _ in 0..40 {
        server.get("/healthcheck").await;
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    assert_eq!(failures(&server.log()), 1, "{}", server.log());
}

#[tokio::test]
async fn prometheus_text_counts_requests_latency_caches_and_downloads() {
    let symsrv = SymbolServer::with_elf_debug().await;
    let server = Server::start("");
    let sources = json!([{"type": "http", "id": "symsrv", "url": symsrv.url}]);
    let (_, r) = server.post("/symbolicate", &elf_request(sources)).await;
    assert_elf_symbolicated(&r);
    let unknown = "/requests/00000000-0000-0000-0000-000000000000";
    assert_eq!(server.get(unknown).await.0, 404);
    assert_eq!(server.get("/no/such/route").await.0, 404);

    let m = server.scrape().await;
    let requests = |endpoint, status| {
        m.get(
            "http_requests_total",
            &[("endpoint", endpoint), ("status", status)],
        )
    };
    assert_eq!(requests("/symbolicate", "200"), Some(1.0), "{m:#?}");
    // Labelled by route, never by the path a client sent.
    assert_eq!(requests("/requests/{id}", "404"), Some(1.0), "{m:#?}");
    assert_eq!(requests("unmatched", "404"), Some(1.0), "{m:#?}");
    assert!(
        m.samples
            .iter()
            .all(|s| !s.labels.values().any(|v| v == unknown)),
        "{m:#?}"
    );
    assert_eq!(m.types["http_requests_total"], "counter");
    assert!(m.help.contains_key("http_requests_total"), "{m:#?}");

    assert_eq!(m.types["http_request_duration_seconds"], "histogram");
    let latency = [("endpoint", "/symbolicate")];
    assert_eq!(
        m.get("http_request_duration_seconds_count", &latency),
        Some(1.0)
    );
    assert!(m.get("http_request_duration_seconds_sum", &latency) > Some(0.0));
    let buckets = m
        .samples
        .iter()
        .filter(|s| {
            s.name == "http_request_duration_seconds_bucket"
                && s.labels
                    .get("endpoint")
                    .is_some_and(|e| e == "/symbolicate")
        })
        .count();
    assert!(buckets > 10, "{m:#?}");
    // Only the scrape itself is being answered.
    assert_eq!(m.get("http_requests_in_flight", &[]), Some(1.0));
    assert_eq!(m.get("requests_in_flight", &[]), Some(0.0));
    assert_eq!(
        m.get("requests_finished_total", &[("status", "completed")]),
        Some(1.0)
    );

    let lookups = |kind, layer| m.get("cache_lookups_total", &[("kind", kind), ("layer", layer)]);
    assert_eq!(lookups("symcaches", "computed"), Some(1.0), "{m:#?}");
    // Every layer is there from the start, so rates work from zero.
    assert_eq!(lookups("symcaches", "shared"), Some(0.0), "{m:#?}");
    assert_eq!(
        m.get(
            "downloads_total",
            &[("source_type", "http"), ("outcome", "ok")]
        ),
        Some(1.0),
        "{m:#?}"
    );
    let size = std::fs::metadata(elf_debug_file()).unwrap().len();
    assert_eq!(
        m.get("downloads_bytes_total", &[("source_type", "http")]),
        Some(size as f64)
    );
    // Every candidate location was fetched once, into the objects cache, and timed
    // whatever came of it (the fixture is at one of them).
    let http_downloads: f64 = m
        .samples
        .iter()
        .filter(|s| s.name == "downloads_total" && s.labels["source_type"] == "http")
        .map(|s| s.value)
        .sum();
    assert!(http_downloads > 1.0, "{m:#?}");
    assert_eq!(lookups("objects", "computed"), Some(http_downloads));
    let not_found = [("source_type", "http"), ("outcome", "not_found")];
    assert_eq!(
        m.get("downloads_total", &not_found),
        Some(http_downloads - 1.0)
    );
    let timed = m.get(
        "downloads_duration_seconds_count",
        &[("source_type", "http")],
    );
    assert_eq!(timed, Some(http_downloads));
}

/// The reader the tests above rely on.
#[test]
fn reads_labels_with_braces_commas_and_escapes() {
    let text = "# TYPE x_total counter\n\
                x_total{endpoint=\"/requests/{id}\",note=\"a,b \\\"q\\\" \\\\\"} 3\n\
                # TYPE h histogram\n\
                h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1.5\nh_count 2\n";
    let exp = Exposition::parse(text).unwrap();
    assert_eq!(
        exp.get(
            "x_total",
            &[("endpoint", "/requests/{id}"), ("note", "a,b \"q\" \\")]
        ),
        Some(3.0)
    );
    assert!(Exposition::parse("y 1\n").is_err(), "no TYPE line");
    let broken = "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 3\n";
    assert!(Exposition::parse(broken).is_err(), "+Inf is not _count");
}
