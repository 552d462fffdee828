//! The image as self-hosted Sentry runs it, without a Docker engine: the Dockerfile's
//! final stage is read (its `USER`, `ENTRYPOINT`, `CMD`, the binary it copies, the link
//! it makes and the config it bakes in) and laid out under a temporary root, and its
//! entrypoint runs with the arguments of self-hosted's compose file, as the image's
//! user when the suite runs as root. Only the values a container changes by mounting
//! (`bind`'s port, `cache_dir`'s root) are rewritten.

use crate::common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// self-hosted's `docker-compose.yml`, service `symbolicator`: its `command`.
const COMPOSE_RUN: &str = "run -c /etc/symbolicator/config.yml";
/// self-hosted's `docker-compose.yml`, service `symbolicator`: its `healthcheck.test`.
const COMPOSE_HEALTHCHECK: &[&str] = &[
    "CMD",
    "/bin/symbolicator",
    "healthcheck",
    "-c",
    "/etc/symbolicator/config.yml",
];
/// self-hosted's `docker-compose.yml`, service `symbolicator-cleanup`: its `command`.
const COMPOSE_CLEANUP: &str = "cleanup -c /etc/symbolicator/config.yml --repeat 1h";
/// self-hosted's `symbolicator/config.example.yml`, the file its install copies to
/// `symbolicator/config.yml` and mounts at `/etc/symbolicator`. It is another
/// project's file, so it is read from the peer data next to the clone (as CI has it);
/// without it the test fails, unless `OMNISYM_SELF_HOSTED=skip` lets it skip.
fn self_hosted_config(test: &str) -> Option<String> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/peer/self-hosted/config.example.yml");
    match std::fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(err) => {
            let why = format!("self-hosted's config is not at {} ({err})", path.display());
            common::skip_or_fail(common::SELF_HOSTED, test, &why);
            None
        }
    }
}

/// What the final stage of the Dockerfile says.
#[derive(Debug)]
struct FinalStage {
    user: Option<(u32, u32)>,
    entrypoint: Vec<String>,
    cmd: Vec<String>,
    workdir: String,
    /// Where the binary is copied to from the build stage.
    binary: String,
    /// `ln -s target link`.
    links: Vec<(String, String)>,
    /// `COPY <repo file> <image path>` of files from the repository.
    files: Vec<(String, String)>,
    volumes: Vec<String>,
    exposed: Vec<String>,
}

fn instructions(dockerfile: &str) -> Vec<(String, String)> {
    let mut joined = Vec::new();
    let mut current = String::new();
    for line in dockerfile.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.starts_with('#') || trimmed.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                joined.push(std::mem::take(&mut current));
            }
        }
    }
    joined
        .into_iter()
        .map(|line| {
            let (op, rest) = line.split_once(char::is_whitespace).unwrap_or((&line, ""));
            (op.to_ascii_uppercase(), rest.trim().to_owned())
        })
        .collect()
}

fn exec_form(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_else(|_| panic!("not in exec form: {text}"))
}

fn final_stage() -> FinalStage {
    let dockerfile =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Dockerfile")).unwrap();
    let all = instructions(&dockerfile);
    let last_from = all.iter().rposition(|(op, _)| op == "FROM").unwrap();
    let mut stage = FinalStage {
        user: None,
        entrypoint: Vec::new(),
        cmd: Vec::new(),
        workdir: "/".into(),
        binary: String::new(),
        links: Vec::new(),
        files: Vec::new(),
        volumes: Vec::new(),
        exposed: Vec::new(),
    };
    for (op, rest) in &all[last_from + 1..] {
        match op.as_str() {
            "USER" => {
                let (uid, gid) = rest.split_once(':').unwrap_or((rest, rest));
                stage.user = Some((uid.parse().unwrap(), gid.parse().unwrap()));
            }
            "ENTRYPOINT" => stage.entrypoint = exec_form(rest),
            "CMD" => stage.cmd = exec_form(rest),
            "WORKDIR" => stage.workdir = rest.clone(),
            "VOLUME" => stage.volumes = exec_form(rest),
            "EXPOSE" => stage.exposed = rest.split_whitespace().map(String::from).collect(),
            "COPY" => {
                let words: Vec<&str> = rest.split_whitespace().collect();
                let (flags, paths): (Vec<&str>, Vec<&str>) =
                    words.iter().partition(|w| w.starts_with("--"));
                let [src, dest] = paths[..] else {
                    panic!("COPY with one source expected: {rest}")
                };
                if flags.iter().any(|f| f.starts_with("--from=")) {
                    stage.binary = dest.to_owned();
                } else {
                    stage.files.push((src.to_owned(), dest.to_owned()));
                }
            }
            "RUN" => {
                for command in rest.split("&&") {
                    let words: Vec<&str> = command.split_whitespace().collect();
                    if let ["ln", "-s", target, link] = words[..] {
                        stage.links.push((target.to_owned(), link.to_owned()));
                    }
                }
            }
            _ => {}
        }
    }
    stage
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The image's file system under a temporary directory, with a config at the path the
/// compose file mounts.
struct Image {
    stage: FinalStage,
    root: tempfile::TempDir,
    port: u16,
    /// The container's environment: every process in it, the healthcheck included, sees it.
    env: Vec<(String, String)>,
}

impl Image {
    fn new(config: &str) -> Image {
        let stage = final_stage();
        let root = tempfile::tempdir().unwrap();
        let image = Image {
            stage,
            root,
            port: common::free_port(),
            env: Vec::new(),
        };
        // The binary the suite built, where the build stage's COPY puts it.
        let binary = image.path(&image.stage.binary);
        std::fs::create_dir_all(binary.parent().unwrap()).unwrap();
        let built = Path::new(env!("CARGO_BIN_EXE_omnisym"));
        if std::fs::hard_link(built, &binary).is_err() {
            std::fs::copy(built, &binary).unwrap();
        }
        for (target, link) in &image.stage.links {
            let link = image.path(link);
            std::fs::create_dir_all(link.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(image.path(target), link).unwrap();
        }
        for (src, dest) in &image.stage.files {
            let dest = image.path(dest);
            std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
            std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join(src), dest).unwrap();
        }
        for volume in &image.stage.volumes {
            std::fs::create_dir_all(image.path(volume)).unwrap();
        }
        std::fs::create_dir_all(image.path(&image.stage.workdir)).unwrap();
        image.write_config(config);
        // The image's user must reach its binary and own its volumes, as `chown` in the
        // Dockerfile arranges.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(image.root.path(), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        if let (Some((uid, gid)), true) = (image.stage.user, is_root()) {
            for volume in &image.stage.volumes {
                chown_tree(&image.path(volume), uid, gid);
            }
        }
        image
    }

    /// A path in the image, under the temporary root.
    fn path(&self, in_image: &str) -> PathBuf {
        self.root.path().join(in_image.trim_start_matches('/'))
    }

    /// Writes `config` where the compose file mounts it, with `bind` on a free loopback
    /// port and `cache_dir` under the root: the two values a container's network and
    /// volume change.
    fn write_config(&self, config: &str) {
        let mut out = String::new();
        for line in config.lines() {
            if line.starts_with("bind:") {
                out.push_str(&format!("bind: \"0.0.0.0:{}\"\n", self.port));
            } else if let Some(dir) = line.strip_prefix("cache_dir:") {
                let dir = dir.trim().trim_matches('"');
                out.push_str(&format!("cache_dir: \"{}\"\n", self.path(dir).display()));
            } else {
                out.push_str(line);
                out.push('\n');
            }
        }
        let path = self.path("/etc/symbolicator/config.yml");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, out).unwrap();
    }

    /// The program of an exec-form command, resolved as the image's PATH would.
    fn program(&self, name: &str) -> PathBuf {
        if name.starts_with('/') {
            return self.path(name);
        }
        ["/usr/local/bin", "/usr/bin", "/bin"]
            .iter()
            .map(|dir| self.path(&format!("{dir}/{name}")))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{name} is not on the image's PATH"))
    }

    /// A container process: `argv` in exec form, absolute paths inside the image.
    fn command(&self, argv: &[String]) -> Command {
        let mut command = Command::new(self.program(&argv[0]));
        for arg in &argv[1..] {
            if arg.starts_with('/') {
                command.arg(self.path(arg));
            } else {
                command.arg(arg);
            }
        }
        command
            .current_dir(self.path(&self.stage.workdir))
            .env_remove("RUST_LOG")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        if let (Some((uid, gid)), true) = (self.stage.user, is_root()) {
            command.uid(uid).gid(gid);
        }
        command
    }

    /// The image's entrypoint with `args`, as `docker run IMAGE args` or a compose
    /// `command:` runs it.
    fn entrypoint(&self, args: &[String]) -> Command {
        let mut argv = self.stage.entrypoint.clone();
        argv.extend_from_slice(args);
        self.command(&argv)
    }
}

fn chown_tree(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
    if path.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            chown_tree(&entry.unwrap().path(), uid, gid);
        }
    }
}

fn words(command: &str) -> Vec<String> {
    command.split_whitespace().map(String::from).collect()
}

/// Starts the server and waits until it listens.
fn start_server(mut command: Command) -> Child {
    let mut child = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::await_listening(&mut child);
    child
}

/// SIGTERM, then the exit status; kills the process and panics if it has not exited
/// within `limit`.
fn stop(child: &mut Child, limit: Duration) -> ExitStatus {
    common::terminate(child, limit).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("process did not exit within {limit:?}");
    })
}

fn healthcheck(image: &Image, extra: &[&str]) -> (bool, String) {
    // Docker runs `test` without the leading "CMD" marker, in the same container.
    let mut argv: Vec<String> = COMPOSE_HEALTHCHECK[1..]
        .iter()
        .map(|s| s.to_string())
        .collect();
    argv.extend(extra.iter().map(|s| s.to_string()));
    let output = image.command(&argv).output().unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

#[test]
fn the_image_has_upstreams_user_paths_and_port() {
    let stage = final_stage();
    // The owner of what upstream's image writes into the `sentry-symbolicator` volume.
    assert_eq!(stage.user, Some((65532, 65532)));
    assert!(
        stage
            .links
            .iter()
            .any(|(target, link)| link == "/bin/symbolicator" && *target == stage.binary),
        "{stage:?}"
    );
    for volume in ["/data", "/etc/symbolicator"] {
        assert!(stage.volumes.iter().any(|v| v == volume), "{stage:?}");
    }
    assert_eq!(stage.exposed, ["3021"]);
}

#[test]
fn self_hosted_compose_commands_run_unchanged() {
    let Some(config) = self_hosted_config("self_hosted_compose_commands_run_unchanged") else {
        return;
    };
    let mut image = Image::new(&config);
    let statsd = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let statsd_addr = statsd.local_addr().unwrap().to_string();
    // The compose file's `environment:` for both services.
    image
        .env
        .push(("SYMBOLICATOR_STATSD_ADDR".into(), statsd_addr));
    let mut server = start_server(image.entrypoint(&words(COMPOSE_RUN)));

    let (healthy, stdout) = healthcheck(&image, &[]);
    assert!(healthy, "{stdout}");
    assert_eq!(stdout.trim(), "OK");

    // Metrics reach the StatsD address the compose file passes in, under the config's
    // prefix: the healthcheck itself was counted.
    statsd
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let mut buf = [0u8; 65536];
    let mut seen = String::new();
    while !seen.contains("sentry.symbolicator.http.requests:") {
        let n = statsd
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("no StatsD datagram ({e}); so far: {seen}"));
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        seen.push('\n');
    }
    assert!(seen.contains("endpoint:/healthcheck"), "{seen}");

    // The server writes into the volume as the image's user.
    if let (Some((uid, _)), true) = (image.stage.user, is_root()) {
        let data = image.path("/data");
        let written: Vec<_> = std::fs::read_dir(&data).unwrap().flatten().collect();
        assert!(!written.is_empty(), "nothing written under /data");
        for entry in written {
            assert_eq!(entry.metadata().unwrap().uid(), uid, "{:?}", entry.path());
        }
    }

    // The cleanup container: runs a pass at once, then waits for the next; SIGTERM ends
    // it with status 0.
    let mut cleanup = image
        .entrypoint(&words(COMPOSE_CLEANUP))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(cleanup.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("removed"), "{first}");
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        cleanup.try_wait().unwrap().is_none(),
        "--repeat keeps running"
    );
    let status = stop(&mut cleanup, Duration::from_secs(10));
    assert_eq!(status.code(), Some(0));

    let status = stop(&mut server, Duration::from_secs(30));
    assert_eq!(status.code(), Some(0));

    // Nothing listens any more: the healthcheck fails, and within its timeout.
    let start = Instant::now();
    let (healthy, stdout) = healthcheck(&image, &["--timeout", "3"]);
    assert!(!healthy);
    assert_eq!(stdout.trim(), "ERROR");
    assert!(start.elapsed() < Duration::from_secs(10));
}

#[test]
fn docker_run_with_the_baked_in_config() {
    let stage = final_stage();
    let (_, baked) = stage
        .files
        .iter()
        .find(|(_, dest)| stage.cmd.iter().any(|arg| arg == dest))
        .expect("CMD names the config file the image bakes in");
    let (src, _) = stage.files.iter().find(|(_, d)| d == baked).unwrap();
    let config = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(src)).unwrap();
    let image = Image::new(&config);
    let mut server = start_server(image.entrypoint(&image.stage.cmd.clone()));
    let (healthy, stdout) = healthcheck(&image, &[]);
    assert!(healthy, "{stdout}");
    // `-c` also goes before the subcommand, and `--addr` overrides `bind`.
    let argv = words(&format!(
        "/bin/symbolicator -c /etc/symbolicator/config.yml healthcheck --addr 127.0.0.1:{}",
        image.port
    ));
    assert!(image.command(&argv).output().unwrap().status.success());
    assert_eq!(stop(&mut server, Duration::from_secs(30)).code(), Some(0));
}

#[test]
fn cleanup_repeat_without_a_value_uses_the_configured_interval() {
    let image = Image::new("cache_dir: /data\ncache_cleanup_interval: 1s\n");
    let argv = words("cleanup --repeat -c /etc/symbolicator/config.yml");
    let mut cleanup = image
        .entrypoint(&argv)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(cleanup.stdout.take().unwrap()).lines();
    let start = Instant::now();
    for _ in 0..3 {
        let line = lines.next().unwrap().unwrap();
        assert!(line.contains("removed"), "{line}");
    }
    // Three passes, two pauses of a second between them.
    assert!(start.elapsed() >= Duration::from_millis(1900));
    assert_eq!(stop(&mut cleanup, Duration::from_secs(10)).code(), Some(0));
}

#[test]
fn a_volume_the_user_cannot_write_fails_at_start_naming_it() {
    let test = "a_volume_the_user_cannot_write_fails_at_start_naming_it";
    let Some(config) = self_hosted_config(test) else {
        return;
    };
    let mut image = Image::new(&config);
    image
        .env
        .push(("SYMBOLICATOR_STATSD_ADDR".into(), "127.0.0.1:9".into()));
    let data = image.path("/data");
    if !is_root() {
        // Only root can hand the volume to another user.
        common::skip_or_fail(
            common::ROOT_TESTS,
            test,
            "it needs root, to hand the volume to another user",
        );
        return;
    }
    let (uid, _) = image.stage.user.expect("the image has a USER");
    // A volume left by an image that ran as another user.
    chown_tree(&data, uid + 1, uid + 1);
    let output = image.entrypoint(&words(COMPOSE_RUN)).output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not writable"), "{stderr}");
    assert!(stderr.contains(&data.display().to_string()), "{stderr}");
}
