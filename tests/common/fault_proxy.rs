//! A TCP proxy on loopback in front of an HTTP/1 server (the [`super::SymbolServer`]) that
//! breaks response bodies on demand, the way real networks do: it stalls after part of a
//! body, resets the connection mid-body, or trickles the body out slowly. Requests pass
//! through untouched; responses are parsed only as far as their head and
//! `Content-Length`, so keep-alive connections carry several responses and each one
//! meets the fault that is set when its head arrives.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

/// What happens to the next response bodies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Bodies pass whole.
    None,
    /// The head and part of the body are sent, then nothing, with the connection open.
    Stall,
    /// The head and part of the body are sent, then a TCP reset (SO_LINGER 0 close).
    Reset,
    /// The whole body, `chunk` bytes at a time, `every` apart.
    Trickle { chunk: usize, every: Duration },
}

impl Fault {
    pub fn name(&self) -> String {
        match self {
            Fault::None => "none".to_owned(),
            Fault::Stall => "stall mid-body".to_owned(),
            Fault::Reset => "reset mid-body".to_owned(),
            Fault::Trickle { chunk, every } => {
                format!("trickle {chunk} B every {} ms", every.as_millis())
            }
        }
    }
}

/// Bytes of a body sent before a stall or reset: enough that the client is reading the
/// body, never the whole of it.
const BODY_BEFORE_FAULT: u64 = 512;
/// Longest response head read; the symbol server's are far shorter.
const MAX_HEAD: usize = 64 * 1024;

pub struct FaultProxy {
    /// `http://127.0.0.1:<port>/`, the upstream's paths below it.
    pub url: String,
    fault: Arc<Mutex<Fault>>,
    broken: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// A proxy to `upstream`, an `http://host:port/` URL; bodies pass whole until
    /// [`FaultProxy::set`] says otherwise.
    pub async fn start(upstream: &str) -> FaultProxy {
        Self::start_on("127.0.0.1", upstream).await
    }

    /// [`FaultProxy::start`] listening on another loopback address (`127.0.0.2`, say):
    /// a host of its own, whose failures the server's host deny list does not hold
    /// against the upstream.
    pub async fn start_on(ip: &str, upstream: &str) -> FaultProxy {
        let upstream = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let fault = Arc::new(Mutex::new(Fault::None));
        let broken = Arc::new(AtomicUsize::new(0));
        let (fault2, broken2) = (fault.clone(), broken.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let (upstream, fault, broken) = (upstream.clone(), fault2.clone(), broken2.clone());
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&upstream).await {
                        connection(client, server, &fault, &broken).await;
                    }
                });
            }
        });
        FaultProxy {
            url,
            fault,
            broken,
            task,
        }
    }

    pub fn set(&self, fault: Fault) {
        *self.fault.lock().unwrap() = fault;
    }

    /// Response bodies broken (stalled, reset or trickled) so far.
    pub fn broken(&self) -> usize {
        self.broken.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Relays one client connection until either side closes; a reset closes it at once.
async fn connection(
    client: TcpStream,
    server: TcpStream,
    fault: &Mutex<Fault>,
    broken: &AtomicUsize,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (server_read, mut server_write) = server.into_split();
    let requests = tokio::io::copy(&mut client_read, &mut server_write);
    let responses = relay_responses(
        BufReader::new(server_read),
        &mut client_write,
        fault,
        broken,
    );
    tokio::select! {
        _ = requests => {}
        reset = responses => {
            if reset {
                let _ = client_write.as_ref().set_zero_linger();
            }
        }
    }
    // Both halves of both sockets drop here: with zero linger, the client sees an RST.
}

/// Relays responses one by one; `true` when the connection is to be reset. A stall
/// never returns: the connection stays open until the client gives up.
async fn relay_responses(
    mut server: BufReader<OwnedReadHalf>,
    client: &mut OwnedWriteHalf,
    fault: &Mutex<Fault>,
    broken: &AtomicUsize,
) -> bool {
    loop {
        let Some((head, body_len)) = read_head(&mut server).await else {
            return false;
        };
        let fault = *fault.lock().unwrap();
        if client.write_all(&head).await.is_err() {
            return false;
        }
        let Some(body_len) = body_len else {
            // No length to go by (chunked, or until close): relay the rest as it is.
            let _ = tokio::io::copy(&mut server, client).await;
            return false;
        };
        if body_len > 0 && fault != Fault::None {
            broken.fetch_add(1, Ordering::Relaxed);
        }
        let mut body = (&mut server).take(body_len);
        match fault {
            Fault::None => {}
            _ if body_len == 0 => {}
            Fault::Stall | Fault::Reset => {
                let before = BODY_BEFORE_FAULT.min(body_len / 2);
                let mut part = (&mut body).take(before);
                if tokio::io::copy(&mut part, client).await.is_err()
                    || client.flush().await.is_err()
                {
                    return false;
                }
                if fault == Fault::Reset {
                    return true;
                }
                std::future::pending::<()>().await;
            }
            Fault::Trickle { chunk, every } => {
                let mut buf = vec![0; chunk.max(1)];
                loop {
                    let n = match body.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if client.write_all(&buf[..n]).await.is_err() {
                        return false;
                    }
                    tokio::time::sleep(every).await;
                }
            }
        }
        if tokio::io::copy(&mut body, client).await.is_err() {
            return false;
        }
    }
}

/// A response head, and its body's length when it has a `Content-Length`; `None` at the
/// end of the connection.
async fn read_head(server: &mut BufReader<OwnedReadHalf>) -> Option<(Vec<u8>, Option<u64>)> {
    let mut head = Vec::new();
    loop {
        let before = head.len();
        let n = server.read_until(b'\n', &mut head).await.ok()?;
        if n == 0 || head.len() > MAX_HEAD {
            return None;
        }
        let line = &head[before..];
        if line == b"\r\n" || line == b"\n" {
            break;
        }
    }
    let text = String::from_utf8_lossy(&head);
    let mut length = None;
    for line in text.lines() {
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("transfer-encoding") {
                return Some((head.clone(), None));
            }
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().ok();
            }
        }
    }
    // A response without a length and without chunking ends with the connection.
    Some((head.clone(), length))
}
