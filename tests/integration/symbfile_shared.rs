//! Symbfile uploads in a fleet's shared store: the parts of an upload that is refused,
//! or that expires, leave the store as they leave the replicas' disks, and each one
//! removed is counted (`symbfile_parts_removed_total`). Two real servers share a store
//! on a directory (`shared_cache.filesystem`) or on loopback S3.

use std::path::Path;
use std::time::{Duration, Instant};

use axum::http::StatusCode;

use crate::common::symbfile::{Part, config, refused, split, symbfile};
use crate::common::{Server, files_under};

/// The parts the shared store below `root` holds (their file names), of any upload.
fn shared_parts(root: &Path) -> Vec<String> {
    files_under(&root.join("symbfiles/v1/pending"))
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("part-"))
        .collect()
}

async fn removed(server: &Server, store: &str, reason: &str) -> f64 {
    server.scrape().await.value(
        "symbfile_parts_removed_total",
        &[("store", store), ("reason", reason)],
    )
}

/// `shared_yaml` configures the shared store, whose objects are files below `root`.
async fn refused_and_expired_parts_leave_the_shared_store(shared_yaml: &str, root: &Path) {
    let yaml = config(&format!("  pending_upload_timeout: 1s\n{shared_yaml}"));
    let (a, b) = (Server::start(&yaml), Server::start(&yaml));
    let ranges = symbfile("ranges.symbfile");
    let halves = split(&ranges, 2);

    // Part 0 reaches one replica, the last part the other, which gathers part 0 from
    // the store and refuses the upload: neither part is of use to anyone.
    let id = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";
    Part::ranges(id, 0, 2, halves[0]).accepted(&b).await;
    assert_eq!(shared_parts(root).len(), 1);
    let answer = Part::ranges(id, 1, 2, b"not the rest of a symbfile")
        .send(&a)
        .await;
    assert_eq!(refused(answer, StatusCode::BAD_REQUEST), "1004");
    assert_eq!(shared_parts(root), Vec::<String>::new());
    assert_eq!(removed(&a, "shared", "refused").await, 2.0);
    assert_eq!(removed(&a, "local", "refused").await, 2.0);

    // An upload left unfinished expires on the replica that received its part, which
    // then removes that part from the store; a new upload there is what looks.
    let idle = "00112233445566778899aabbccddeeff";
    Part::ranges(idle, 0, 2, halves[0]).accepted(&a).await;
    assert_eq!(shared_parts(root).len(), 1);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut n = 0u32;
    while holds(root, idle) {
        assert!(
            Instant::now() < deadline,
            "still in the store: {:?}",
            shared_parts(root)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Each one a new upload, which expires the idle ones.
        n += 1;
        Part::ranges(&format!("{n:032x}"), 0, 2, halves[0])
            .accepted(&a)
            .await;
    }
    assert!(removed(&a, "shared", "expired").await >= 1.0);
    assert!(removed(&a, "local", "expired").await >= 1.0);
}

/// Whether the store below `root` holds a part of the upload of `id`.
fn holds(root: &Path, id: &str) -> bool {
    let parts = files_under(&root.join("symbfiles/v1/pending"));
    parts.iter().any(|p| {
        let upload = p.parent().unwrap().file_name().unwrap().to_string_lossy();
        upload.contains(id)
            && p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("part-")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_shared_directory() {
    let shared = tempfile::tempdir().unwrap();
    let yaml = format!(
        "shared_cache:\n  filesystem:\n    path: {}\n",
        shared.path().display()
    );
    refused_and_expired_parts_leave_the_shared_store(&yaml, shared.path()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_s3() {
    use crate::common::s3::{ACCESS_KEY, S3Server, SECRET_KEY};
    let s3 = S3Server::start().await;
    std::fs::create_dir_all(s3.root.path().join("shared")).unwrap();
    let yaml = format!(
        "shared_cache:\n  s3:\n    bucket: shared\n    prefix: fleet\n    region: [us-east-1, \"{}\"]\n    access_key: {ACCESS_KEY}\n    secret_key: {SECRET_KEY}\n",
        s3.url
    );
    refused_and_expired_parts_leave_the_shared_store(&yaml, &s3.root.path().join("shared/fleet"))
        .await;
}

/// Every function name in an answer's frames.
fn functions(response: &serde_json::Value) -> Vec<String> {
    response["stacktraces"][0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["function"].as_str().map(str::to_owned))
        .collect()
}

/// A rebuild uploaded again under its FileID is often the same size as the last upload
/// (one name changed): the other replica tells the two apart by content and answers
/// from the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_same_size_reupload_reaches_the_other_replica() {
    use crate::common::symbfile::{file_id, probe_request};
    let shared = tempfile::tempdir().unwrap();
    let yaml = config(&format!(
        "shared_cache:\n  filesystem:\n    path: {}\n",
        shared.path().display()
    ));
    let (a, b) = (Server::start(&yaml), Server::start(&yaml));
    let id = file_id();
    let first = symbfile("ranges.symbfile");
    Part::ranges(&id, 0, 1, &first).accepted(&a).await;
    let (_, answer) = b.post("/symbolicate", &probe_request(&id)).await;
    assert!(
        functions(&answer).iter().any(|f| f == "process_record"),
        "{answer:#}"
    );

    let (old, new) = (b"process_record", b"process_RECORD");
    let at = first.windows(old.len()).position(|w| w == old).unwrap();
    let mut second = first.clone();
    second[at..at + old.len()].copy_from_slice(new);
    assert_eq!(second.len(), first.len());
    Part::ranges(&id, 0, 1, &second).accepted(&a).await;

    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let (_, answer) = b.post("/symbolicate", &probe_request(&id)).await;
        let names = functions(&answer);
        if names.iter().any(|f| f == "process_RECORD") {
            assert!(!names.iter().any(|f| f == "process_record"), "{answer:#}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the other replica still answers from the first upload: {answer:#}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
