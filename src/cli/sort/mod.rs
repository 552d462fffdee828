//! `omnisym sort`, upstream's symsorter: lays debug files (and zip archives of them) out
//! in a directory a filesystem, S3 or GCS source reads. The unified layout is
//! symsorter's tree, `.meta` files, `refs/` and `bundles/` included; every other layout
//! the sources read works too. This module walks the inputs and runs the workers;
//! `store::layout` says what a file is and where it goes (through `sources`' layout
//! rules, shared with the store that takes uploads), `write` puts it there, `inputs` opens files and zip entries, `bundle` names imports
//! and writes their index, `sources` makes source bundles for `--with-sources`.

mod bundle;
mod inputs;
mod sources;
mod write;

use std::collections::HashMap;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use anyhow::{Context, Result, anyhow, bail};
use symbolic::common::ByteView;
use symbolic::debuginfo::{Archive, FileFormat, Object, ObjectKind};

use super::SortArgs;
use super::progress::WorkBar;
use crate::fetch::DecompressLimits;
use crate::lookup::{fat64, source_map_file_name, source_mapping_url};
use crate::sources::{DirectoryLayoutType, ObjectType};
use crate::store::layout::{Described, Meta, describe, describe_proguard};
use inputs::Entry;
use write::{Outcome, Store, zstd_level};

pub fn run(args: SortArgs) -> Result<()> {
    let ignore_errors = args.ignore_errors;
    let result = execute(args);
    if let Err(err) = &result
        && !ignore_errors
    {
        // symsorter's hint, after the error main prints.
        return Err(anyhow!(
            "{err:#}\n\nTo skip this error, use --ignore-errors."
        ));
    }
    result
}

fn execute(args: SortArgs) -> Result<()> {
    let unified = args.layout == DirectoryLayoutType::Unified;
    if !unified && (args.bundle_id.is_some() || args.multiple_bundles) {
        bail!("bundles (--bundle-id, --multiple-bundles) belong to the unified layout");
    }
    let root = match &args.prefix {
        Some(prefix) => args.output.join(prefix),
        None => args.output.clone(),
    };
    let source_roots = sources::SourceRoots::new(&args.source_root)?;
    let out = Printer {
        quiet: args.quiet,
        bar: Mutex::new(None),
    };
    if args.compress == 0 {
        out.log("WARNING: No compression used. Consider to pass -zz.".into());
        out.log(String::new());
    }

    let groups: Vec<(Option<String>, Vec<PathBuf>)> = if args.multiple_bundles {
        let mut groups = Vec::new();
        for path in &args.input {
            let id = bundle::bundle_id_of(path);
            if !bundle::is_bundle_id(&id) {
                bail!(
                    "{} names no bundle (--multiple-bundles names each bundle after its input)",
                    path.display()
                );
            }
            groups.push((Some(id), vec![path.clone()]));
        }
        groups
    } else {
        if let Some(id) = &args.bundle_id
            && !bundle::is_bundle_id(id)
        {
            bail!(
                "Invalid bundle id {id:?}: a bundle id is a file name of A-Z a-z 0-9 . , + - \
                 and _ between them, and not of dots only (. or ..)"
            );
        }
        vec![(args.bundle_id.clone(), args.input.clone())]
    };
    // Large zip entries and source bundles are unpacked beside the output: the folder
    // must be there before the first of them.
    std::fs::create_dir_all(&root).with_context(|| format!("cannot create {}", root.display()))?;
    let limits = inputs::entry_limits(args.max_entry_size, args.max_entry_ratio);

    let (mut sorted, mut bundled, mut skipped, mut refused) = (0, 0, 0, 0);
    for (bundle_id, paths) in groups {
        if args.multiple_bundles {
            out.log(format!("[bundle: {}]", bundle_id.as_deref().unwrap_or("")));
        }
        let sorter = Sorter {
            store: Store::new(
                root.clone(),
                zstd_level(args.compress),
                unified,
                bundle_id.clone(),
            ),
            layout: args.layout,
            ignore_errors: args.ignore_errors,
            limits,
            source_roots: &source_roots,
            out: &out,
            sorted: Mutex::new(Vec::new()),
            skipped: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
        };
        let sources_made = sorter.sort_files(&paths, args.with_sources)?;
        let ids = sorter.sorted.into_inner().unwrap();
        if let Some(bundle_id) = &bundle_id {
            out.log("Writing bundle meta data".into());
            bundle::write_index(&root, bundle_id, &ids)?;
        }
        sorted += ids.len();
        bundled += sources_made;
        skipped += sorter.skipped.into_inner();
        refused += sorter.refused.into_inner();
    }

    out.log(String::new());
    out.log("Done.".into());
    out.log(format!("Sorted {sorted} debug files"));
    if args.with_sources {
        out.log(format!("Created {bundled} source bundles"));
    }
    if skipped > 0 {
        out.log(format!(
            "Skipped {skipped} files the {} layout has no place for",
            layout_name(args.layout)
        ));
    }
    // A refused entry is a bad input like a broken file: the run fails unless `-I`
    // says to go on, but as nothing of it was written, the other inputs were sorted.
    if refused > 0 {
        if !args.ignore_errors {
            bail!(
                "{refused} zip entries were past the size limits and were skipped (listed above)"
            );
        }
        out.log(format!(
            "Skipped {refused} zip entries past the size limits"
        ));
    }
    Ok(())
}

fn layout_name(layout: DirectoryLayoutType) -> String {
    clap::ValueEnum::to_possible_value(&layout)
        .map(|v| v.get_name().to_owned())
        .unwrap_or_default()
}

/// stdout for what symsorter prints there (silenced by `-q`), stderr for warnings and
/// errors, each line printed around the progress bar.
struct Printer {
    quiet: bool,
    bar: Mutex<Option<WorkBar>>,
}

impl Printer {
    fn log(&self, line: String) {
        if !self.quiet {
            self.around_bar(|| println!("{line}"));
        }
    }

    fn warn(&self, line: String) {
        self.around_bar(|| eprintln!("{line}"));
    }

    fn around_bar(&self, print: impl FnOnce()) {
        match &*self.bar.lock().unwrap() {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
    }

    fn advance(&self, bytes: u64) {
        if let Some(bar) = &*self.bar.lock().unwrap() {
            bar.advance(bytes);
        }
    }
}

/// One bundle's run: where files go, and what went there.
struct Sorter<'a> {
    store: Store,
    layout: DirectoryLayoutType,
    ignore_errors: bool,
    /// How far a zip entry may inflate.
    limits: DecompressLimits,
    /// Where `--with-sources` may read sources.
    source_roots: &'a sources::SourceRoots,
    out: &'a Printer,
    /// The unified ids of the files written, for the bundle index and the count.
    sorted: Mutex<Vec<String>>,
    /// Files the layout has no place for.
    skipped: AtomicUsize,
    /// Zip entries past `limits`.
    refused: AtomicUsize,
}

/// Debug files whose sources `--with-sources` bundles: by unified id, the file to read
/// them from, or `None` once a source bundle for that id was among the inputs.
type SourceCandidates = Mutex<HashMap<String, Option<PathBuf>>>;

impl Sorter<'_> {
    /// Sorts every file below `paths`, then (with `with_sources`) makes the missing
    /// source bundles; returns how many it made.
    fn sort_files(&self, paths: &[PathBuf], with_sources: bool) -> Result<usize> {
        self.out.log("Sorting debug information files".into());
        let files = inputs::files(paths);
        let total = files.iter().map(|(_, size)| size).sum();
        *self.out.bar.lock().unwrap() = Some(WorkBar::to_stderr(total, self.out.quiet));
        let candidates = SourceCandidates::default();
        let result = parallel(&files, |(path, size)| {
            let result = self.sort_file(path, with_sources.then_some(&candidates));
            self.out.advance(*size);
            result
        });
        *self.out.bar.lock().unwrap() = None;
        result?;
        if !with_sources {
            return Ok(0);
        }

        self.out.log("Creating source bundles".into());
        let todo: Vec<(String, PathBuf)> = candidates
            .into_inner()
            .unwrap()
            .into_iter()
            .filter_map(|(id, path)| Some((id, path?)))
            .collect();
        let made = AtomicUsize::new(0);
        parallel(&todo, |(id, path)| {
            let log = |line| self.out.log(line);
            let Some((bundle, object_type)) =
                sources::make_bundle(path, id, self.store.root(), self.source_roots, &log)?
            else {
                return Ok(());
            };
            self.sort_objects(&bundle, &file_name(path), Some(object_type))?;
            made.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })?;
        Ok(made.into_inner())
    }

    fn sort_file(&self, path: &Path, candidates: Option<&SourceCandidates>) -> Result<()> {
        // Unreadable files are passed over, as symsorter does.
        let Ok(data) = ByteView::open(path) else {
            return Ok(());
        };
        let name = file_name(path);
        if inputs::is_zip(&data) {
            return self.sort_zip(data, &path.to_string_lossy());
        }
        let sorted = match fat64::slices(&data) {
            // symbolic reads no fat file of the 64-bit layout: each slice is read alone.
            Some(Ok(slices)) => {
                let mut sorted = Vec::new();
                for range in slices {
                    sorted.extend(self.sort_objects(&data[range], &name, None)?);
                }
                sorted
            }
            Some(Err(err)) if self.ignore_errors => {
                self.out
                    .warn(format!("error: ignored error {err} ({name})"));
                return Ok(());
            }
            Some(Err(err)) => {
                return Err(anyhow!(err)).with_context(|| format!("failed to process file {name}"));
            }
            None if Archive::peek(&data) == FileFormat::Unknown => {
                return self.sort_proguard(&data, &name);
            }
            None => {
                let sorted = self.sort_objects(&data, &name, None)?;
                if Archive::peek(&data) == FileFormat::Wasm {
                    self.sort_wasm_source_map(path, &data, &name)?;
                }
                sorted
            }
        };
        let Some(candidates) = candidates else {
            return Ok(());
        };
        let mut candidates = candidates.lock().unwrap();
        for (id, kind) in sorted {
            if kind == ObjectKind::Sources {
                candidates.insert(id, None);
            } else if kind == ObjectKind::Debug {
                candidates
                    .entry(id)
                    .or_insert_with(|| Some(path.to_owned()));
            }
        }
        Ok(())
    }

    /// A WebAssembly module's source map, looked for beside the module's input as the
    /// server looks for it beside a stored module (under the name the module's
    /// `sourceMappingURL` ends in, then the input's name plus `.map`), and written at the
    /// sorted module's path plus `.map`, where the server finds it whatever the URL
    /// says. A module has no other way into a store with its map.
    fn sort_wasm_source_map(&self, path: &Path, data: &[u8], name: &str) -> Result<()> {
        let Ok(object) = Object::parse(data) else {
            return Ok(());
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        let named = source_mapping_url(data)
            .as_deref()
            .and_then(source_map_file_name)
            .map(|file| dir.join(file));
        let beside = PathBuf::from(format!("{}.map", path.display()));
        let found = named
            .into_iter()
            .chain([beside])
            .find_map(|candidate| Some((std::fs::read(&candidate).ok()?, candidate)));
        let Some((map, map_path)) = found else {
            return Ok(());
        };
        if let Err(err) = sourcemap::SourceMap::from_slice(&map) {
            self.out.warn(format!(
                "WARNING: {} is no source map ({err}); {name} is sorted without it.",
                map_path.display()
            ));
            return Ok(());
        }
        let Some(described) = describe(&object, name, None)? else {
            return Ok(());
        };
        let Some(rel) = described.path(self.layout) else {
            return Ok(());
        };
        let map_name = file_name(&map_path);
        let meta = Meta {
            name: Some(map_name.clone()),
            arch: None,
            file_format: None,
        };
        match self
            .store
            .put(&format!("{rel}.map"), &map, described.rank(), &meta)?
        {
            Outcome::Written(at) | Outcome::Replaced(at) => {
                self.out.log(format!(
                    "{map_name} (source map of {name}) -> {}",
                    at.display()
                ));
            }
            Outcome::Duplicate(_) => {}
        }
        Ok(())
    }

    fn sort_zip(&self, data: ByteView<'static>, zip_name: &str) -> Result<()> {
        let scratch = self.store.root();
        let result =
            inputs::zip_entries(Cursor::new(data), scratch, &self.limits, |name, entry| {
                let entry = match entry {
                    Entry::Read(entry) => entry,
                    Entry::Refused(why) => {
                        self.refused.fetch_add(1, Ordering::Relaxed);
                        self.out.warn(format!(
                            "error: skipped zip entry {name} of {zip_name}: {why}"
                        ));
                        return Ok(());
                    }
                };
                if Archive::peek(&entry) != FileFormat::Unknown {
                    self.sort_objects(&entry, &name, None)?;
                    Ok(())
                } else {
                    self.sort_proguard(&entry, &name)
                }
            });
        match result {
            Err(err) if self.ignore_errors => {
                self.out
                    .warn(format!("error: ignored error {err:#} ({zip_name})"));
                Ok(())
            }
            result => result.with_context(|| format!("failed to process file {zip_name}")),
        }
    }

    fn sort_proguard(&self, data: &[u8], name: &str) -> Result<()> {
        let Some(uuid) = inputs::proguard_uuid(data) else {
            return Ok(());
        };
        let meta = Meta {
            name: Some(name.to_owned()),
            arch: None,
            file_format: None,
        };
        self.put(&describe_proguard(uuid), data, name, "proguard", meta)?;
        Ok(())
    }

    /// Sorts the objects of one debug file (all slices of a fat Mach-O); returns the
    /// unified id and kind of each one written.
    fn sort_objects(
        &self,
        data: &[u8],
        name: &str,
        bundled_from: Option<ObjectType>,
    ) -> Result<Vec<(String, ObjectKind)>> {
        let mut sorted = Vec::new();
        // With `-I` a broken file (or object) is reported and the rest of it skipped,
        // keeping what was sorted of it so far, as symsorter does.
        macro_rules! or_skip {
            ($result:expr) => {
                match $result {
                    Ok(value) => value,
                    Err(err) if self.ignore_errors => {
                        self.out
                            .warn(format!("error: ignored error {err:#} ({name})"));
                        return Ok(sorted);
                    }
                    Err(err) => {
                        return Err(err).with_context(|| format!("failed to process file {name}"));
                    }
                }
            };
        }
        let archive =
            or_skip!(Archive::parse(data).map_err(|e| anyhow!("failed to parse archive {e}")));
        for object in archive.objects() {
            let object = or_skip!(object.map_err(|e| anyhow!(e)));
            let Some(described) = or_skip!(describe(&object, name, bundled_from)) else {
                continue;
            };
            let meta = Meta {
                name: Some(name.to_owned()),
                arch: Some(object.arch().name().to_owned()),
                file_format: Some(object.file_format().name().to_owned()),
            };
            let label = format!("{}, {}", object.kind().name(), object.arch().name());
            if let Some(id) = self.put(&described, object.data(), name, &label, meta)? {
                sorted.push((id, object.kind()));
            }
        }
        Ok(sorted)
    }

    /// Writes one file where the layout wants it; its unified id if it was written.
    fn put(
        &self,
        described: &Described,
        data: &[u8],
        name: &str,
        label: &str,
        meta: Meta,
    ) -> Result<Option<String>> {
        let Some(rel) = described.path(self.layout) else {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            self.out.warn(format!(
                "WARNING: the {} layout has no place for {name} ({label}); skipped.",
                layout_name(self.layout)
            ));
            return Ok(None);
        };
        let id = described.unified_id().unwrap_or_default();
        match self.store.put(&rel, data, described.rank(), &meta)? {
            Outcome::Written(path) => {
                self.out
                    .log(format!("{name} ({label}) -> {}", path.display()));
                self.sorted.lock().unwrap().push(id.clone());
                Ok(Some(id))
            }
            // The file it replaced is listed already.
            Outcome::Replaced(path) => {
                self.out
                    .log(format!("{name} ({label}) -> {} (replaced)", path.display()));
                Ok(Some(id))
            }
            Outcome::Duplicate(path) => {
                self.out.warn(format!(
                    "WARNING: File {} already exists, you seem to have duplicate debug files \
                     for ID {id}.\nSkipping {name}.",
                    path.display()
                ));
                Ok(None)
            }
        }
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Runs `work` on every item on a few threads (compressing is the slow part, and it
/// parallelises); the first error stops the others from taking more items and is
/// returned.
fn parallel<T: Sync>(items: &[T], work: impl Fn(&T) -> Result<()> + Sync) -> Result<()> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len().max(1));
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let first_error = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                while !failed.load(Ordering::Relaxed) {
                    let Some(item) = items.get(next.fetch_add(1, Ordering::Relaxed)) else {
                        break;
                    };
                    if let Err(err) = work(item) {
                        failed.store(true, Ordering::Relaxed);
                        first_error.lock().unwrap().get_or_insert(err);
                    }
                }
            });
        }
    });
    match first_error.into_inner().unwrap() {
        Some(err) => Err(err),
        None => Ok(()),
    }
}
