//! Replicas of one fleet on loopback: a poll is answered by whichever replica it
//! reaches, and a poll for a replica that is gone is a 404, so that Sentry sends the
//! request again.

use crate::common;

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use common::{Server, SymbolServer, assert_elf_symbolicated, elf_request, free_port};
use serde_json::{Value, json};

/// `n` replicas, each listing every replica as a peer.
fn fleet(n: usize) -> Vec<Server> {
    let ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
    let peers: Vec<String> = ports
        .iter()
        .map(|p| format!("\"http://127.0.0.1:{p}\""))
        .collect();
    ports
        .iter()
        .map(|port| {
            Server::start(&format!(
                "bind: 127.0.0.1:{port}\nfleet:\n  advertise_url: http://127.0.0.1:{port}\n  peers: [{}]\n",
                peers.join(", ")
            ))
        })
        .collect()
}

async fn polls(server: &Server, outcome: &str) -> f64 {
    server
        .scrape()
        .await
        .value("requests_polls_total", &[("outcome", outcome)])
}

/// A request to `server` whose source answers after `delay_ms`, answered `pending`.
async fn pending_on(server: &Server, symsrv: &SymbolServer, delay_ms: u64) -> String {
    let sources = json!([{
        "type": "http", "id": "slow",
        "url": format!("{}slow/{delay_ms}/", symsrv.url),
    }]);
    let (status, first) = server
        .post("/symbolicate?timeout=0", &elf_request(sources))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(first["status"], "pending", "{first}");
    first["request_id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_is_answered_by_any_replica() {
    let symsrv = SymbolServer::with_elf_debug().await;
    let mut replicas = fleet(3);
    let id = pending_on(&replicas[0], &symsrv, 1500).await;

    // The other replicas hold nothing of it, and send the poll on to its owner.
    let (status, done) = replicas[1].get(&format!("/requests/{id}?timeout=30")).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_elf_symbolicated(&done);
    let (status, again) = replicas[2].get(&format!("/requests/{id}?timeout=0")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again, done);
    assert_eq!(polls(&replicas[1], "forwarded").await, 1.0);
    assert_eq!(polls(&replicas[0], "here").await, 2.0);

    // Ids no replica of the fleet minted: never sent anywhere, and unknown.
    let foreign: Value = json!(uuid::Builder::from_custom_bytes([7; 16]).into_uuid());
    for unknown in [
        foreign.as_str().unwrap().to_owned(),
        uuid::Uuid::new_v4().to_string(),
    ] {
        let (status, _) = replicas[1]
            .get(&format!("/requests/{unknown}?timeout=0"))
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    assert_eq!(polls(&replicas[1], "unknown").await, 2.0);
    assert_eq!(polls(&replicas[1], "forwarded").await, 1.0);

    // Its owner killed mid-request, the request is gone with it: 404, and Sentry sends
    // it again.
    let id = pending_on(&replicas[0], &symsrv, 20_000).await;
    replicas[0].kill();
    let (status, _) = replicas[2].get(&format!("/requests/{id}?timeout=5")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(polls(&replicas[2], "owner_unreachable").await, 1.0);
}

/// Outside a fleet, ids are random UUIDs as upstream's, and name no replica.
#[tokio::test]
async fn outside_a_fleet_ids_are_random() {
    let symsrv = SymbolServer::with_elf_debug().await;
    let server = Server::start("");
    let id = pending_on(&server, &symsrv, 500).await;
    let id: uuid::Uuid = id.parse().unwrap();
    assert_eq!(id.get_version_num(), 4);
}

/// SIGTERM, in order: readiness fails while everything is still served (for
/// `drain_delay`), then the listener closes, then what is in flight finishes and the
/// process exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_fails_readiness_then_closes_then_finishes_in_flight() {
    let symsrv = SymbolServer::with_elf_debug().await;
    let mut server = Server::start("drain_delay: 2s\nshutdown_timeout: 20s\n");
    let status = |path: &'static str| {
        let url = format!("{}{path}", server.url);
        async move { common::client().get(url).send().await.map(|r| r.status()) }
    };
    assert_eq!(status("/ready").await.unwrap(), 200);
    let sources = json!([{
        "type": "http", "id": "slow",
        "url": format!("{}slow/4000/", symsrv.url),
    }]);
    let in_flight = {
        let url = format!("{}/symbolicate", server.url);
        let body = elf_request(sources);
        tokio::spawn(async move {
            let resp = common::client().post(url).json(&body).send().await.unwrap();
            (resp.status(), resp.json::<Value>().await.unwrap())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = i32::try_from(server.pid()).unwrap();
    // SAFETY: a plain kill(2) of our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let signalled = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Draining: not ready, still alive, and still serving what a balancer sends late.
    assert_eq!(status("/ready").await.unwrap(), 503);
    assert_eq!(status("/healthcheck").await.unwrap(), 200);
    let empty = json!({"sources": [], "modules": [], "stacktraces": []});
    let (code, answer) = server.post("/symbolicate", &empty).await;
    assert_eq!(
        (code.as_u16(), &answer["status"]),
        (200, &json!("completed"))
    );
    assert!(
        signalled.elapsed() < Duration::from_secs(2),
        "the test ran late"
    );

    // Past the delay the listener is closed...
    tokio::time::sleep(Duration::from_millis(2500).saturating_sub(signalled.elapsed())).await;
    let refused = status("/healthcheck").await.unwrap_err();
    assert!(refused.is_connect(), "{refused:?}");
    // ...while the request that was in progress gets its whole answer.
    let (code, answer) = in_flight.await.unwrap();
    assert_eq!(code, 200);
    assert_elf_symbolicated(&answer);
    let exit = server
        .terminate(Duration::from_secs(10))
        .expect("the server exits once its requests are done");
    assert!(exit.success(), "{exit:?}");
}
