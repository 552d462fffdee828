//! Downloads over slow and broken links, end to end: the real server fetching the ELF
//! fixture's debug file from a symbol server written here on raw TCP, which stalls,
//! drops the connection midway, trickles, or serves byte ranges, so that every byte the
//! server sends and every header it is asked with can be checked.

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::s3::{ACCESS_KEY, S3Server, SECRET_KEY};
use common::{
    Server, assert_elf_symbolicated, candidates, elf_debug_file, elf_debug_path, elf_request,
    unified_path,
};

use crate::secondary_inputs::{il2cpp_code_id, il2cpp_file, il2cpp_request};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the symbol server answers the debug file.
#[derive(Clone, Copy, Debug)]
enum Behaviour {
    /// Announces the whole file, sends 100 bytes, then nothing while the connection lives.
    Stall,
    /// The first answer (ETag "v1") breaks off at half the file; later ones serve the
    /// range asked for if If-Range names "v1", else the whole file.
    DropThenRanges,
    /// The first answer sends half of another file of the same size (ETag "v1") and
    /// breaks off; then the file changed to the fixture (ETag "v2"), whose whole body
    /// every later request gets, whatever range it asks for under If-Range "v1".
    DropThenChanged,
    /// The whole file, `chunk` bytes every `every`.
    Trickle { chunk: usize, every: Duration },
}

/// One request the symbol server got: its path and headers (names in lower case).
#[derive(Clone, Debug)]
struct Asked {
    path: String,
    headers: BTreeMap<String, String>,
}

struct FlakySource {
    url: String,
    asked: Arc<Mutex<Vec<Asked>>>,
    /// Bytes of the debug file's bodies sent, over all answers.
    sent: Arc<Mutex<usize>>,
}

impl FlakySource {
    async fn start(behaviour: Behaviour) -> FlakySource {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let asked = Arc::new(Mutex::new(Vec::new()));
        let sent = Arc::new(Mutex::new(0));
        let (log, count) = (asked.clone(), sent.clone());
        let file = Arc::new(std::fs::read(elf_debug_file()).unwrap());
        let wanted = format!("/{}", elf_debug_path());
        tokio::spawn(async move {
            let mut answered = 0usize;
            while let Ok((socket, _)) = listener.accept().await {
                let Some(request) = read_head(socket).await else {
                    continue;
                };
                let (mut socket, asked) = request;
                log.lock().unwrap().push(asked.clone());
                if asked.path != wanted {
                    let _ = socket
                        .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                        .await;
                    continue;
                }
                answered += 1;
                let (file, count) = (file.clone(), count.clone());
                tokio::spawn(answer(socket, behaviour, answered, asked, file, count));
            }
        });
        FlakySource { url, asked, sent }
    }

    fn source(&self) -> Value {
        json!([{"id": "flaky", "type": "http", "url": self.url, "layout": {"type": "native"}}])
    }

    /// The requests for the debug file, in order.
    fn file_requests(&self) -> Vec<Asked> {
        let wanted = format!("/{}", elf_debug_path());
        let asked = self.asked.lock().unwrap();
        asked.iter().filter(|a| a.path == wanted).cloned().collect()
    }

    fn sent(&self) -> usize {
        *self.sent.lock().unwrap()
    }
}

/// Reads a request's head; one request per connection is all the tests need.
async fn read_head(mut socket: TcpStream) -> Option<(TcpStream, Asked)> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if socket.read(&mut byte).await.ok()? == 0 || head.len() > 64 * 1024 {
            return None;
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?.to_owned();
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_lowercase(), value.trim().to_owned()))
        .collect();
    Some((socket, Asked { path, headers }))
}

async fn answer(
    mut socket: TcpStream,
    behaviour: Behaviour,
    nth: usize,
    asked: Asked,
    file: Arc<Vec<u8>>,
    sent: Arc<Mutex<usize>>,
) {
    let len = file.len();
    let head = |status: &str, etag: &str, extra: &str, body_len: usize| {
        format!(
            "HTTP/1.1 {status}\r\ncontent-length: {body_len}\r\netag: {etag}\r\n\
             connection: close\r\n{extra}\r\n"
        )
    };
    let send = async |socket: &mut TcpStream, bytes: &[u8]| {
        if socket.write_all(bytes).await.is_ok() {
            *sent.lock().unwrap() += bytes.len();
        }
    };
    let range_from = |validator: &str| -> Option<usize> {
        if asked.headers.get("if-range").map(String::as_str) != Some(validator) {
            return None;
        }
        let range = asked.headers.get("range")?;
        range
            .strip_prefix("bytes=")?
            .strip_suffix('-')?
            .parse()
            .ok()
    };
    match behaviour {
        Behaviour::Stall => {
            let _ = socket
                .write_all(head("200 OK", "\"v1\"", "", len).as_bytes())
                .await;
            send(&mut socket, &file[..100]).await;
            tokio::time::sleep(Duration::from_secs(120)).await;
        }
        Behaviour::DropThenRanges => {
            let from = if nth == 1 { None } else { range_from("\"v1\"") };
            match from {
                Some(from) if from < len => {
                    let range = format!("content-range: bytes {from}-{}/{len}\r\n", len - 1);
                    let head = head("206 Partial Content", "\"v1\"", &range, len - from);
                    let _ = socket.write_all(head.as_bytes()).await;
                    send(&mut socket, &file[from..]).await;
                }
                _ => {
                    let _ = socket
                        .write_all(head("200 OK", "\"v1\"", "", len).as_bytes())
                        .await;
                    let end = if nth == 1 { len / 2 } else { len };
                    send(&mut socket, &file[..end]).await;
                }
            }
        }
        Behaviour::DropThenChanged => {
            if nth == 1 {
                let _ = socket
                    .write_all(head("200 OK", "\"v1\"", "", len).as_bytes())
                    .await;
                // Not the fixture: spliced with the fixture's second half, it is no ELF.
                send(&mut socket, &vec![0x5a; len / 2]).await;
            } else {
                let _ = socket
                    .write_all(head("200 OK", "\"v2\"", "", len).as_bytes())
                    .await;
                send(&mut socket, &file).await;
            }
        }
        Behaviour::Trickle { chunk, every } => {
            let _ = socket
                .write_all(head("200 OK", "\"v1\"", "", len).as_bytes())
                .await;
            for part in file.chunks(chunk) {
                send(&mut socket, part).await;
                tokio::time::sleep(every).await;
            }
        }
    }
    let _ = socket.shutdown().await;
}

/// The candidate of the flaky source's debug file.
fn file_candidate(response: &Value) -> Value {
    let path = elf_debug_path();
    candidates(response)
        .into_iter()
        .find(|c| c["source"] == "flaky" && c["location"].as_str().unwrap().ends_with(&path))
        .unwrap_or_else(|| panic!("no candidate for {path}: {response:#}"))
}

/// A source that sends a few bytes and then nothing fails after `max_download_stall`
/// (each of its tries), long before any other limit would end it: upstream's 10 s
/// streaming floor and 5 min download timeout, which are what the old code had.
#[tokio::test]
async fn a_stalled_download_fails_after_the_stall_timeout() {
    let source = FlakySource::start(Behaviour::Stall).await;
    let server = Server::start("max_download_stall: 1s\n");
    let started = Instant::now();
    let (_, response) = server
        .post("/symbolicate?timeout=60", &elf_request(source.source()))
        .await;
    let took = started.elapsed();
    assert_eq!(response["status"], "completed", "{response:#}");
    let download = &file_candidate(&response)["download"];
    assert_eq!(download["status"], "error", "{download}");
    let details = download["details"].as_str().unwrap_or_default();
    assert!(details.contains("no data arrived for 1s"), "{download}");
    // The first attempt kept its 100 bytes, so it is no try; then three tries that
    // ask for the rest (the source answers each with the file whole, which starts it
    // over and keeps nothing new), of a second each.
    let requests = source.file_requests();
    assert_eq!(requests.len(), 4, "{requests:#?}");
    for resumed in &requests[1..] {
        assert_eq!(
            resumed.headers.get("range").map(String::as_str),
            Some("bytes=100-")
        );
    }
    assert!(took < Duration::from_secs(8), "{took:?}");
}

/// Symbolicates the ELF fixture from a source behaving as told, which it must find; the
/// source and the headers of the second of the two requests for the file it got.
async fn fetched_twice(behaviour: Behaviour) -> (FlakySource, BTreeMap<String, String>) {
    let source = FlakySource::start(behaviour).await;
    let server = Server::start("");
    let (_, response) = server
        .post("/symbolicate", &elf_request(source.source()))
        .await;
    assert_elf_symbolicated(&response);
    let requests = source.file_requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    assert!(!requests[0].headers.contains_key("range"));
    let resumed = requests[1].headers.clone();
    assert_eq!(resumed.get("if-range").map(String::as_str), Some("\"v1\""));
    (source, resumed)
}

/// A connection dropped midway is resumed with a Range request that names the first
/// answer's ETag, and the bytes already on disk are kept: the file crosses the link
/// once, and the module is symbolicated from it.
#[tokio::test]
async fn a_dropped_download_resumes_with_a_range_request() {
    let (source, resumed) = fetched_twice(Behaviour::DropThenRanges).await;
    let len = std::fs::metadata(elf_debug_file()).unwrap().len() as usize;
    assert_eq!(resumed.get("range"), Some(&format!("bytes={}-", len / 2)));
    assert_eq!(source.sent(), len, "the first half was sent again");
}

/// A file that changed between the attempts (the source answers the If-Range request
/// with the new file whole) is not spliced onto the old one's bytes: they are thrown
/// away and the new file is used.
#[tokio::test]
async fn a_file_that_changed_meanwhile_is_fetched_whole_not_spliced() {
    let (_, resumed) = fetched_twice(Behaviour::DropThenChanged).await;
    assert!(resumed.contains_key("range"), "{resumed:?}");
}

/// A download that takes longer than upstream's time limits allow it (the old code's
/// 10 s streaming floor), on a link that keeps bringing bytes: the request stays
/// `pending` through polls that end before it, the console and the metrics show its
/// bytes so far of the announced size, and it ends found.
#[tokio::test]
async fn a_slow_download_stays_pending_and_shows_its_progress() {
    let len = std::fs::metadata(elf_debug_file()).unwrap().len() as usize;
    // About 13 s for the whole file.
    let chunk = len.div_ceil(26);
    let every = Duration::from_millis(500);
    let source = FlakySource::start(Behaviour::Trickle { chunk, every }).await;
    let server = Server::start("max_download_stall: 5s\n");
    let (_, mut answer) = server
        .post("/symbolicate?timeout=1", &elf_request(source.source()))
        .await;
    assert_eq!(answer["status"], "pending", "{answer:#}");
    let id = answer["request_id"].as_str().unwrap().to_owned();

    let mut shown = Vec::new();
    let mut gauge_seen = false;
    let mut polls = 0;
    let started = Instant::now();
    while answer["status"] == "pending" {
        assert!(started.elapsed() < Duration::from_secs(40), "{answer:#}");
        let (_, status) = server.get("/console/api/status").await;
        if let Some(running) = status["downloading"].as_array()
            && let Some(download) = running.iter().find(|d| {
                d["name"]
                    .as_str()
                    .unwrap_or("")
                    .ends_with(&elf_debug_path())
            })
        {
            assert_eq!(download["total"], len, "{download}");
            shown.push(download["bytes"].as_u64().unwrap());
        }
        let metrics = server.scrape().await;
        if metrics.get("downloads_in_flight_total_bytes", &[]) == Some(len as f64)
            && metrics.get("downloads_in_flight_bytes", &[]).unwrap_or(0.0) > 0.0
        {
            gauge_seen = true;
        }
        let (_, polled) = server.get(&format!("/requests/{id}?timeout=1")).await;
        answer = polled;
        polls += 1;
    }
    assert_elf_symbolicated(&answer);
    assert!(started.elapsed() > Duration::from_secs(10));
    assert!(polls > 5, "{polls} polls");
    // The console saw the download move: several distinct counts, rising, within the file.
    let mut distinct = shown.clone();
    distinct.dedup();
    assert!(distinct.len() >= 3, "{shown:?}");
    assert!(shown.windows(2).all(|w| w[0] <= w[1]), "{shown:?}");
    assert!(shown.iter().all(|&b| b <= len as u64), "{shown:?}");
    assert!(gauge_seen, "the in-flight gauges never showed the download");
    let metrics = server.scrape().await;
    assert_eq!(metrics.get("downloads_in_flight_bytes", &[]), Some(0.0));
    assert_eq!(metrics.get("downloads_in_flight", &[]), Some(0.0));
}

// ---------------------------------------------------------------- max size per backend

/// An il2cpp line mapping of 4000 bytes (the fixture's, padded), past a limit of 1000.
fn padded_mapping() -> Vec<u8> {
    let mut mapping = std::fs::read(il2cpp_file("LineNumberMapping.json")).unwrap();
    mapping.resize(4000, b' ');
    mapping
}

/// The console's record of the download at `location`.
async fn download_record(server: &Server, location: &str) -> Value {
    let (_, downloads) = server.get("/console/api/downloads").await;
    downloads["downloads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["location"] == location)
        .cloned()
        .unwrap_or_else(|| panic!("no download of {location}: {downloads:#}"))
}

/// A file over its format's size limit on a filesystem or S3 source is refused before
/// it is read (from its size: the file's, or S3's Content-Length), not copied whole and
/// refused only when unpacked: its download ends `too_large` with no bytes.
#[tokio::test]
async fn a_file_over_its_limit_is_refused_unread_from_filesystem_and_s3() {
    let server = Server::start("max_il2cpp_mapping_size: 1000\n");
    let rel = unified_path(&il2cpp_code_id(), "il2cpp");
    let mapping = padded_mapping();
    let game_dir = tempfile::tempdir().unwrap();
    let debug = game_dir
        .path()
        .join(unified_path(&il2cpp_code_id(), "debuginfo"));
    std::fs::create_dir_all(debug.parent().unwrap()).unwrap();
    std::fs::copy(il2cpp_file("game.debug"), &debug).unwrap();
    let game = json!({"type": "filesystem", "id": "game", "path": game_dir.path(),
                      "layout": {"type": "unified"}});

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(&rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, &mapping).unwrap();
    let fs_source = json!({"type": "filesystem", "id": "local", "path": dir.path(),
                           "layout": {"type": "unified"}});
    let request = il2cpp_request(json!([fs_source, game]));
    server.post("/symbolicate?scope=fs", &request).await;
    let record = download_record(&server, &path.display().to_string()).await;
    assert_eq!(record["outcome"], "too_large", "{record}");
    assert_eq!(record["bytes"], Value::Null, "{record}");

    let s3 = S3Server::start().await;
    let data = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(data.path(), &mapping).unwrap();
    s3.put("symbols", &rel, data.path());
    let s3_source = json!({"type": "s3", "id": "bucket", "bucket": "symbols",
                           "region": ["us-east-1", s3.url], "access_key": ACCESS_KEY,
                           "secret_key": SECRET_KEY, "layout": {"type": "unified"}});
    let request = il2cpp_request(json!([s3_source, game]));
    server.post("/symbolicate?scope=s3", &request).await;
    let record = download_record(&server, &format!("s3://symbols/{rel}")).await;
    assert_eq!(record["outcome"], "too_large", "{record}");
    assert_eq!(record["bytes"], Value::Null, "{record}");
}

// ---------------------------------------------------------------- free disk

/// A file whose announced size does not fit on the cache's disk (a small tmpfs) is
/// refused before its first byte lands, with an error that says so, and the disk is
/// left as it was.
#[tokio::test]
async fn a_file_the_disk_has_no_room_for_is_refused_before_it_lands() {
    let test = "a_file_the_disk_has_no_room_for_is_refused_before_it_lands";
    let Some(tmpfs) = common::tmpfs::Tmpfs::mount_or_skip(4 << 20, test) else {
        return;
    };
    let symsrv = common::SymbolServer::start().await;
    // 8 MiB: twice the disk. Zeros are no ELF, but it is refused before that matters.
    symsrv.put_bytes(&elf_debug_path(), &vec![0u8; 8 << 20]);
    let work = tempfile::tempdir().unwrap();
    let server = Server::start_in(work.path(), &tmpfs.path().join("cache"), "");
    let sources = json!([{"id": "flaky", "type": "http", "url": symsrv.url,
                          "layout": {"type": "native"}}]);
    let (_, response) = server.post("/symbolicate", &elf_request(sources)).await;
    assert_eq!(response["status"], "completed", "{response:#}");
    let download = &file_candidate(&response)["download"];
    assert_eq!(download["status"], "error", "{download}");
    let details = download["details"].as_str().unwrap_or_default();
    assert!(details.contains("not enough free disk space"), "{download}");
    // Not retried: the disk will not have grown in a few milliseconds.
    let asked = symsrv
        .hits()
        .iter()
        .filter(|hit| hit.ends_with(&elf_debug_path()))
        .count();
    assert_eq!(asked, 1);
}
