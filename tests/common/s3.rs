//! An in-process S3 server (s3s-fs) for tests: a directory per bucket, SigV4 checked
//! against one key pair.

use std::path::Path;

pub const ACCESS_KEY: &str = "AKIAOMNISYMTEST";
pub const SECRET_KEY: &str = "omnisym-test-secret-key";

/// An S3 server backed by a directory (bucket = subdirectory) that verifies SigV4
/// signatures against one key pair.
pub struct S3Server {
    pub url: String,
    pub root: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl S3Server {
    pub async fn start() -> S3Server {
        use hyper_util::rt::{TokioExecutor, TokioIo};
        let root = tempfile::tempdir().unwrap();
        let fs = s3s_fs::FileSystem::new(root.path()).unwrap();
        let mut builder = s3s::service::S3ServiceBuilder::new(fs);
        builder.set_auth(s3s::auth::SimpleAuth::from_single(ACCESS_KEY, SECRET_KEY));
        let service = builder.build();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let http = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    continue;
                };
                let conn = http
                    .serve_connection(TokioIo::new(socket), service.clone())
                    .into_owned();
                tokio::spawn(async move {
                    let _ = conn.await;
                });
            }
        });
        S3Server {
            url: format!("http://{addr}"),
            root,
            task,
        }
    }

    pub fn put(&self, bucket: &str, key: &str, src: &Path) {
        let dest = self.root.path().join(bucket).join(key);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(src, dest).unwrap();
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}
