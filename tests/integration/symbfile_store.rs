//! Symbfile uploads when a store is configured: the store is their home, so a server
//! with an empty `symbfile.dir` answers what another one received; and a `symbfile.dir`
//! from before the store is moved into it once at start, logged.

use std::time::{Duration, Instant};

use crate::common::Server;
use crate::common::symbfile::{
    Part, assert_probes, config, file_id, probe_request, symbfile, upload_all,
};

fn store_yaml(store: &std::path::Path) -> String {
    format!(
        "store:\n  backend:\n    type: filesystem\n    path: {}\n",
        store.display()
    )
}

#[tokio::test]
async fn uploads_live_in_the_store() {
    let store = tempfile::tempdir().unwrap();
    let yaml = config(&format!("\n{}", store_yaml(store.path())));
    let (a, b) = (Server::start(&yaml), Server::start(&yaml));
    let id = file_id();
    Part::ranges(&id, 0, 1, &symbfile("ranges.symbfile"))
        .accepted(&a)
        .await;
    let (_, answer) = b.post("/symbolicate", &probe_request(&id)).await;
    assert_eq!(answer["modules"][0]["debug_status"], "found", "{answer:#}");
}

#[tokio::test]
async fn an_existing_symbfile_dir_moves_into_the_store_once() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("symbfiles");
    let with_dir = config(&format!("  dir: {}\n", dir.display()));
    let id = file_id();
    {
        // An older setup: uploads in symbfile.dir only.
        let old = Server::start(&with_dir);
        upload_all(&old, &id).await;
    }
    let store = tempfile::tempdir().unwrap();
    let server = Server::start(&format!("{with_dir}{}", store_yaml(store.path())));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !server
        .log()
        .contains("the symbfiles of symbfile.dir are in the store now")
    {
        assert!(Instant::now() < deadline, "{}", server.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(server.log().contains("moved=2"), "{}", server.log());
    assert!(dir.join("migrated-to-store").exists());

    // Another server, with a symbfile.dir of its own and empty, answers from the store.
    let other = Server::start(&format!("{}\n{}", config(""), store_yaml(store.path())));
    let (_, answer) = other.post("/symbolicate", &probe_request(&id)).await;
    assert_probes(&answer);

    // Once: the next start moves nothing and says nothing of it.
    drop(server);
    let again = Server::start(&format!("{with_dir}{}", store_yaml(store.path())));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!again.log().contains("in the store now"), "{}", again.log());
}
