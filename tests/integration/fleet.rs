//! Replicas of one fleet on loopback: a poll is answered by whichever replica it
//! reaches, and a poll for a replica that is gone is a 404, so that Sentry sends the
//! request again.

use crate::common;

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
