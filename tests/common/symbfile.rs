//! Symbfile uploads as `symbtool push-symbols` sends them, the fixtures of
//! fixtures/symbfile (written by Python's protobuf package from the ELF of
//! fixtures/native, fixtures/symbfile/make.py), and the llvm-symbolizer oracle of
//! fixtures/native/manifest.json to check what the server answers for them.

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::{ELF_BASE, Server, client, fixture_json, fixtures, hex, object};

pub const KEY: &str = "test-upload-key";

pub fn config(extra: &str) -> String {
    format!("symbfile:\n  api_keys: [\"{KEY}\", \"another-key\"]\n{extra}")
}

pub fn symbfile(name: &str) -> Vec<u8> {
    std::fs::read(fixtures().join("symbfile").join(name)).unwrap()
}

pub fn manifest() -> Value {
    fixture_json("symbfile/manifest.json")
}

pub fn file_id() -> String {
    manifest()["file_id"].as_str().unwrap().to_owned()
}

/// One part, as `symbtool push-symbols` sends it.
pub struct Part<'a> {
    pub endpoint: &'a str,
    pub key: Option<&'a str>,
    pub file_id: &'a str,
    pub part: u32,
    pub parts: u32,
    pub body: Vec<u8>,
}

impl<'a> Part<'a> {
    pub fn ranges(file_id: &'a str, part: u32, parts: u32, body: &[u8]) -> Self {
        Part {
            endpoint: "/api/symbols-ranges",
            key: Some(KEY),
            file_id,
            part,
            parts,
            body: body.to_vec(),
        }
    }

    pub fn return_pads(file_id: &'a str, part: u32, parts: u32, body: &[u8]) -> Self {
        Part {
            endpoint: "/api/symbols-returnpads",
            ..Part::ranges(file_id, part, parts, body)
        }
    }

    /// The part's request with its headers and without its body, for a caller that
    /// sends the body its own way (slowly, say).
    pub fn request(&self, server: &Server) -> reqwest::RequestBuilder {
        self.request_to(&server.url)
    }

    /// [`Part::request`] to the server at `url` (a balancer, say).
    pub fn request_to(&self, url: &str) -> reqwest::RequestBuilder {
        let mut request = client()
            .post(format!("{url}{}", self.endpoint))
            .header("FileID", self.file_id)
            .header("FilePart", self.part.to_string())
            .header("FileParts", self.parts.to_string());
        if let Some(key) = self.key {
            request = request.header("Authorization", format!("APIKey {key}"));
        }
        request
    }

    pub async fn send(self, server: &Server) -> (StatusCode, Value) {
        self.send_to(&server.url).await
    }

    pub async fn send_to(self, url: &str) -> (StatusCode, Value) {
        let response = self.request_to(url).body(self.body).send().await.unwrap();
        let status = StatusCode::from_u16(response.status().as_u16()).unwrap();
        let body = response.json().await.unwrap();
        (status, body)
    }

    pub async fn accepted(self, server: &Server) {
        let (status, body) = self.send(server).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body, json!({"success": true, "status": 200}));
    }
}

/// Asserts Elastic's error shape; returns the error's code.
pub fn refused(answer: (StatusCode, Value), status: StatusCode) -> String {
    let (got, body) = answer;
    assert_eq!(got, status, "{body}");
    assert_eq!(body["success"], false, "{body}");
    assert_eq!(body["status"], status.as_u16(), "{body}");
    let uuid = body["uuid"].as_str().unwrap();
    assert!(uuid.parse::<uuid::Uuid>().is_ok(), "{body}");
    assert!(
        !body["error"]["Text"].as_str().unwrap().is_empty(),
        "{body}"
    );
    body["error"]["Code"].as_str().unwrap().to_owned()
}

/// Splits `data` into `n` byte ranges of near-equal size.
pub fn split(data: &[u8], n: usize) -> Vec<&[u8]> {
    let size = data.len().div_ceil(n);
    data.chunks(size).collect()
}

pub fn module(file_id: &str) -> Value {
    json!({
        "type": "elf",
        "file_id": file_id,
        "code_file": "/usr/bin/crash",
        "image_addr": format!("{ELF_BASE:#x}"),
        "image_size": object("elf")["image_size"],
    })
}

/// A frame per probe of the native manifest, looked up at exactly its address.
pub fn probe_request(file_id: &str) -> Value {
    let frames: Vec<Value> = object("elf")["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            json!({
                "instruction_addr": format!("{:#x}", ELF_BASE + hex(&p["rel_addr"])),
                "adjust_instruction_addr": false,
            })
        })
        .collect();
    json!({
        "modules": [module(file_id)],
        "stacktraces": [{"frames": frames}],
        "options": {"dif_candidates": true},
    })
}

/// The manifest's crash stack: the crashing instruction, then return addresses.
pub fn crash_stack_request(file_id: &str) -> Value {
    let frames: Vec<Value> = object("elf")["crash_stack"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| json!({"instruction_addr": format!("{:#x}", ELF_BASE + hex(&f["rel_addr"]))}))
        .collect();
    json!({"modules": [module(file_id)], "stacktraces": [{"frames": frames}]})
}

/// `(function, abs_path, lineno)` of the answer's frames, grouped by the request frame
/// each came from (inlinees first, as the oracle lists them).
pub fn chains(response: &Value) -> Vec<Vec<(String, String, u64)>> {
    assert_eq!(response["status"], "completed", "{response:#}");
    let mut out: Vec<Vec<_>> = Vec::new();
    for frame in response["stacktraces"][0]["frames"].as_array().unwrap() {
        assert_eq!(frame["status"], "symbolicated", "{frame}");
        let index = frame["original_index"].as_u64().unwrap() as usize;
        if out.len() <= index {
            out.resize(index + 1, Vec::new());
        }
        out[index].push((
            frame["function"].as_str().unwrap().to_owned(),
            frame["abs_path"].as_str().unwrap().to_owned(),
            frame["lineno"].as_u64().unwrap(),
        ));
    }
    out
}

pub fn oracle(frames: &Value) -> Vec<(String, String, u64)> {
    frames
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["function"].as_str().unwrap().to_owned(),
                f["file"].as_str().unwrap().to_owned(),
                f["line"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The oracle's chain for each entry of the native manifest's `list` (`probes`,
/// `crash_stack`).
pub fn oracle_chains(list: &str) -> Vec<Vec<(String, String, u64)>> {
    object("elf")[list]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| oracle(&entry["frames"]))
        .collect()
}

pub fn assert_probes(response: &Value) {
    assert_eq!(chains(response), oracle_chains("probes"));
}

pub async fn upload_all(server: &Server, file_id: &str) {
    let ranges = symbfile("ranges.symbfile");
    let parts = split(&ranges, 3);
    // Parts may arrive in any order; the upload completes with the last one missing.
    for part in [2, 0, 1] {
        Part::ranges(file_id, part, 3, parts[part as usize])
            .accepted(server)
            .await;
    }
    let pads = symbfile("returnpads.symbfile");
    let at = manifest()["returnpads_second_file_at"].as_u64().unwrap() as usize;
    for (part, body) in [&pads[..at], &pads[at..]].into_iter().enumerate() {
        Part::return_pads(file_id, part as u32, 2, body)
            .accepted(server)
            .await;
    }
}
