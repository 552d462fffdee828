//! The server's log behind a reader that falls behind: requests never wait on it,
//! only access lines are dropped (and counted), and what is queued at SIGTERM is
//! written out before the process exits.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{Server, client, elf_request};
use serde_json::json;

/// Sends `count` `GET /healthcheck`s over 16 connections, each with the request id
/// `{prefix}{i:05}`; fails if they are not all answered 200 within a minute, which is
/// what happens when requests wait for the log's reader.
async fn healthchecks(server: &Server, prefix: &str, count: usize) {
    let url = format!("{}/healthcheck", server.url);
    let tasks: Vec<_> = (0..16)
        .map(|task| {
            let (url, prefix) = (url.clone(), prefix.to_owned());
            tokio::spawn(async move {
                let client = client();
                for i in (task..count).step_by(16) {
                    let response = client
                        .get(&url)
                        .header("x-request-id", format!("{prefix}{i:05}"))
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(response.status(), 200);
                }
            })
        })
        .collect();
    let all = async {
        for task in tasks {
            task.await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("requests waited for the log's reader: not all answered within a minute");
}

/// The request ids of the access lines of `GET /healthcheck` in `log`.
fn logged_ids(log: &str, prefix: &str) -> BTreeSet<String> {
    log.lines()
        .filter(|line| line.contains("omnisym::access") && line.contains("path=/healthcheck"))
        .filter_map(|line| {
            let id = line.split("request_id=").nth(1)?;
            let id = id.split_whitespace().next()?;
            id.starts_with(prefix).then(|| id.to_owned())
        })
        .collect()
}

/// Polls `done` on the server's log for up to `limit`.
fn wait_for_log(server: &Server, limit: Duration, done: impl Fn(&str) -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done(&server.log()) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done(&server.log())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_lines_queued_at_sigterm_are_written_before_the_process_exits() {
    // The defaults: no `logging` section. 800 access lines are more than the pipe holds
    // (some 450), so hundreds are still queued in the server when it is told to stop;
    // few enough that a slow reader on a busy machine still takes them within the
    // second the writers are given at exit.
    const COUNT: usize = 800;
    let mut server = Server::start_log_held("");
    healthchecks(&server, "flush-", COUNT).await;
    server.signal_terminate();
    // Read only now, and slowly: every line past the pipe's worth is still queued in
    // the server, and the last of them leave it well after the server has shut down
    // (a few tenths of a second, where the writers are given a second).
    server.read_log_paced(Duration::from_micros(100));
    let status = tokio::task::block_in_place(|| server.wait_exit(Duration::from_secs(20)));
    let status = status.expect("the server exits within 20 s of SIGTERM");
    assert!(status.success(), "{status:?}");
    // The last lines reach the reader thread a moment after the exit.
    tokio::task::block_in_place(|| {
        wait_for_log(&server, Duration::from_secs(5), |log| {
            logged_ids(log, "flush-").len() == COUNT
        })
    });
    let log = server.log();
    let logged = logged_ids(&log, "flush-");
    let missing: Vec<_> = (0..COUNT)
        .map(|i| format!("flush-{i:05}"))
        .filter(|id| !logged.contains(id))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {COUNT} access lines lost at exit, such as {:?}; the log ends with:\n{}",
        missing.len(),
        &missing[..missing.len().min(5)],
        &log[log.len().saturating_sub(2000)..]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_log_drops_and_counts_access_lines_but_keeps_warnings() {
    // Nothing listens on this port: a download from it fails, and with a threshold of
    // one, the deny list blocks the host at once and says so at `warn`.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = Server::start_log_held(
        "deny_list_threshold: 1\ndeny_list_time_window: 1m\ndeny_list_bucket_size: 1s\n\
         logging:\n  queue_lines: 4\n",
    );
    const COUNT: usize = 1500;
    healthchecks(&server, "flood-", COUNT).await;
    let metrics = server.scrape().await;
    let dropped = metrics.value("logging_dropped_access_lines_total", &[]);
    assert!(
        dropped > 0.0 && dropped < COUNT as f64 + 1.0,
        "dropped {dropped}"
    );

    // More warnings than the queue of the other lines holds, all logged while the pipe
    // is full: one per host, each blocked at its first failed download.
    const HOSTS: u8 = 8;
    let requests: Vec<_> = (1..=HOSTS)
        .map(|n| {
            let source = json!([{
                "type": "http", "id": "dead", "url": format!("http://127.0.0.{n}:{port}/"),
                "layout": {"type": "native"},
            }]);
            let url = format!("{}/symbolicate", server.url);
            let body = elf_request(source);
            tokio::spawn(async move { client().post(url).json(&body).send().await.unwrap() })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.read_log();
    let warned = |log: &str| {
        (1..=HOSTS)
            .filter(|n| {
                log.lines().any(|line| {
                    line.contains("blocking a host after too many failed downloads")
                        && line.contains(&format!("host=127.0.0.{n}"))
                })
            })
            .count()
    };
    tokio::task::block_in_place(|| {
        wait_for_log(&server, Duration::from_secs(30), |log| {
            warned(log) == usize::from(HOSTS)
        })
    });
    let log = server.log();
    assert_eq!(
        warned(&log),
        usize::from(HOSTS),
        "a warning was lost; the log ends with:\n{}",
        &log[log.len().saturating_sub(3000)..]
    );
    for request in requests {
        let answer = tokio::time::timeout(Duration::from_secs(30), request)
            .await
            .expect("the request is answered")
            .unwrap();
        assert_eq!(answer.status(), 200);
    }
    // Each flood line was queued or dropped before its answer went out, so what reaches
    // the log and what was counted account for every request exactly.
    tokio::task::block_in_place(|| {
        wait_for_log(&server, Duration::from_secs(10), |log| {
            logged_ids(log, "flood-").len() as f64 + dropped >= COUNT as f64
        })
    });
    let logged = logged_ids(&server.log(), "flood-").len();
    assert_eq!(
        logged as f64 + dropped,
        COUNT as f64,
        "{logged} logged, {dropped} dropped"
    );
    let status = tokio::task::block_in_place(|| server.terminate(Duration::from_secs(20)));
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
}
