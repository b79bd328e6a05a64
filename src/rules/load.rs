//! Reading rule files: the directory walk, multi-document files, and turning
//! serde errors into [`Diagnostic`]s with positions.
//!
//! A directory is read whole (top-level `*.yaml` / `*.yml`, sorted by name,
//! hidden entries such as the kubelet's `..data` skipped; symlinks followed) and
//! every problem of every file is collected before anything fails. An entry
//! named like a rule file that cannot be read is one of those problems, and
//! every file passes [`super::limits::check`] before it is parsed.

use std::collections::HashMap;
use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use sha2::{Digest as _, Sha256};

use super::limits::{self, MAX_FILE_BYTES, MAX_FILES, MAX_TOTAL_BYTES, MAX_TOTAL_NODES};
use super::position::PositionIndex;
use super::{Diagnostic, Diagnostics, Rule, RuleSet, Severity};

/// The text of one rule file.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// The name diagnostics use (the path as given).
    pub name: String,
    /// The contents.
    pub text: String,
}

impl SourceFile {
    /// The SHA-256 of the contents, in lowercase hex: what `sha256sum` prints
    /// for the file, so an operator can check which version of a ConfigMap
    /// each replica serves.
    pub fn content_hash(&self) -> String {
        hex(&Sha256::digest(self.text.as_bytes()))
    }
}

/// Lowercase hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut text, byte| {
            let _ = write!(text, "{byte:02x}");
            text
        })
}

/// A parsed rule set and where it came from.
#[derive(Debug, Clone)]
pub struct LoadedRuleSet {
    /// The rule set, holding only the rules that parsed.
    pub rule_set: RuleSet<Rule>,
    /// The file it came from.
    pub file: Arc<str>,
    /// Positions of its fields, for diagnostics found later.
    pub positions: Arc<PositionIndex>,
    /// For each rule that parsed, its index in the file's `spec.rules` (rules
    /// that did not parse are left out, so the two can differ).
    pub rule_indices: Vec<usize>,
}

impl LoadedRuleSet {
    /// A diagnostic at `path` within this rule set's document.
    pub fn diagnostic(
        &self,
        path: &str,
        message: impl Into<String>,
        hint: Option<String>,
    ) -> Diagnostic {
        let position = self.positions.locate(path);
        Diagnostic {
            severity: Severity::Error,
            file: self.file.to_string(),
            line: position.line,
            column: position.column,
            path: path.to_owned(),
            message: message.into(),
            hint,
        }
    }
}

/// What reading a directory produced: the rule sets that parsed, and every
/// problem found. A non-empty `diagnostics` means the set must not be served.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    /// Rule sets, in file order then document order.
    pub rule_sets: Vec<LoadedRuleSet>,
    /// The files read, in name order.
    pub files: Vec<SourceFile>,
    /// Every problem found.
    pub diagnostics: Diagnostics,
}

/// The directory could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Listing the directory or reading a file failed.
    #[error("cannot read {path}")]
    Io {
        /// The path that failed.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// What listing a rules directory found: the text of every rule file that
/// could be read, in name order, and a diagnostic for every entry that looks
/// like a rule file but could not be read.
#[derive(Debug, Clone, Default)]
pub struct DirRead {
    /// The rule files read, in name order.
    pub files: Vec<SourceFile>,
    /// One per entry named like a rule file that is not one: a dangling
    /// link, a link loop, a directory, a file too large or not UTF-8.
    pub diagnostics: Diagnostics,
}

impl DirRead {
    /// The SHA-256 of everything read: names, texts and the problems of
    /// unreadable entries, so that a link breaking or being fixed counts as a
    /// change.
    pub fn hash(&self) -> [u8; 32] {
        // Each field is preceded by its length, so moving bytes from one
        // file's end to the next one's name changes the hash.
        let mut hasher = Sha256::new();
        let mut field = |bytes: &[u8]| {
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        };
        for file in &self.files {
            field(file.name.as_bytes());
            field(file.text.as_bytes());
        }
        for diagnostic in self.diagnostics.iter() {
            field(diagnostic.to_string().as_bytes());
        }
        hasher.finalize().into()
    }
}

/// Reads every rule file in `dir` and parses it.
pub fn load_dir(dir: &Path) -> Result<Loaded, LoadError> {
    let read = read_dir(dir)?;
    let mut loaded = load_files(read.files);
    let mut diagnostics = read.diagnostics;
    diagnostics.0.append(&mut loaded.diagnostics.0);
    loaded.diagnostics = diagnostics;
    Ok(loaded)
}

/// Reads the text of every rule file in `dir`: top-level `*.yaml` / `*.yml`
/// entries, sorted by name, following symlinks.
///
/// Hidden entries (the kubelet's `..data` and `..2026_…` directories) are
/// skipped. Every other entry named like a rule file must be a readable
/// regular file of at most [`MAX_FILE_BYTES`]: one that is not is a
/// diagnostic, never skipped, since skipping it would serve the rules
/// without the ones it holds. Only an entry that disappears between the
/// listing and the read is skipped: the directory changed, and the change
/// starts another reload.
pub fn read_dir(dir: &Path) -> Result<DirRead, LoadError> {
    let mut read = DirRead::default();
    read_dir_into(dir, &mut read)?;
    Ok(read)
}

/// Whether [`read_dir`] reads the entry `name`: not hidden, and a
/// [rule file name](is_rule_file_name).
pub(crate) fn is_rule_file(name: &str) -> bool {
    !name.starts_with('.') && is_rule_file_name(name)
}

/// Why an entry [`read_dir`] passes over may have been meant as a rule
/// file: a ConfigMap key such as `.pod-security.yaml` or `pod-security`
/// becomes such an entry, and a directory of nothing else served no rules
/// without a word.
struct UnreadEntry {
    message: &'static str,
    hint: &'static str,
}

impl UnreadEntry {
    fn at(&self, file: &str) -> Diagnostic {
        let mut diagnostic = at_start(file, self.message.to_owned(), self.hint);
        diagnostic.severity = super::Severity::Warning;
        diagnostic
    }
}

/// The warning for the entry `name` that [`read_dir`] does not read, when
/// its name may have been meant for a rule file: hidden but named like one
/// (not the kubelet's own `..data` and `..2026_...`), or with no extension.
/// Said only of a file that [`holds_rules`].
fn unread_entry_warning(name: &str) -> Option<UnreadEntry> {
    if name.starts_with("..") {
        return None;
    }
    if name.starts_with('.') {
        return is_rule_file_name(name).then_some(UnreadEntry {
            message: "hidden file, not read",
            hint: "rename it without the leading dot if it holds rules",
        });
    }
    (!name.contains('.')).then_some(UnreadEntry {
        message: "no extension, not read",
        hint: "rule files are named *.yaml or *.yml; rename it if it holds rules",
    })
}

/// Bytes of an entry not read as a rule file that [`holds_rules`] looks at.
const SNIFFED_BYTES: u64 = 4096;
/// Entries not read as rule files that one read of a directory looks into
/// at most ([`holds_rules`]), however many it holds.
const SNIFFED_ENTRIES: usize = 64;

/// Whether the regular file at `path` begins like a rule file: its first
/// [`SNIFFED_BYTES`] name kadmit's API group. A README, a licence, an
/// editor's lock link or scratch file beside the rules is not warned about.
fn holds_rules(path: &Path) -> bool {
    let Ok(Some(file)) = open_regular(path, MAX_FILE_BYTES) else {
        return false;
    };
    let mut start = Vec::new();
    if file.take(SNIFFED_BYTES).read_to_end(&mut start).is_err() {
        return false;
    }
    String::from_utf8_lossy(&start).contains("kadmit.dev/")
}

/// `*.yaml` or `*.yml`, in any case: `policy.YAML` is a rule file too,
/// not an entry to pass over in silence.
fn is_rule_file_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.ends_with(".yaml") || lower.ends_with(".yml")
}

/// [`read_dir`], adding to `read`: [`MAX_FILES`] and [`MAX_TOTAL_BYTES`]
/// count what `read` already holds. False when a bound stopped the read
/// (a diagnostic says which), and no further file must be read.
fn read_dir_into(dir: &Path, read: &mut DirRead) -> Result<bool, LoadError> {
    let entries = std::fs::read_dir(dir).map_err(|source| LoadError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let mut paths = Vec::new();
    let mut sniffed = 0;
    for entry in entries {
        let entry = entry.map_err(|source| LoadError::Io {
            path: dir.to_owned(),
            source,
        })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !is_rule_file(&name) {
            if let Some(warning) = unread_entry_warning(&name)
                && sniffed < SNIFFED_ENTRIES
            {
                sniffed += 1;
                if holds_rules(&entry.path()) {
                    read.diagnostics
                        .push(warning.at(&entry.path().display().to_string()));
                }
            }
            continue;
        }
        if read.files.len() + paths.len() >= MAX_FILES {
            // Listed no further: which files would be read is not known.
            read.diagnostics
                .push(too_many_files(&dir.display().to_string()));
            return Ok(false);
        }
        paths.push(entry.path());
    }
    paths.sort();
    for path in paths {
        let name = path.display().to_string();
        match read_file(&path) {
            Ok(Some(text)) => {
                if !read.push_within_total(SourceFile { name, text }) {
                    return Ok(false);
                }
            }
            Ok(None) => {}
            Err((message, hint)) => read.diagnostics.push(at_start(&name, message, hint)),
        }
    }
    Ok(true)
}

/// The error of more than [`MAX_FILES`] rule files, at `file`: the
/// directory or the path that would be one too many.
fn too_many_files(file: &str) -> Diagnostic {
    at_start(
        file,
        format!("more than {MAX_FILES} rule files"),
        "serve fewer rule files; each may hold many rule sets",
    )
}

/// An error at the start of `file`.
fn at_start(file: &str, message: String, hint: &str) -> Diagnostic {
    Diagnostic::error(file, 1, 1, message, hint)
}

impl DirRead {
    /// Adds `file`, unless with it the files read would hold more than
    /// [`MAX_TOTAL_BYTES`]: then it is a diagnostic, no further file is
    /// read, and this returns false.
    fn push_within_total(&mut self, file: SourceFile) -> bool {
        let total: u64 = self
            .files
            .iter()
            .chain(std::iter::once(&file))
            .map(|file| file.text.len() as u64)
            .sum();
        if total > MAX_TOTAL_BYTES {
            self.diagnostics.push(at_start(
                &file.name,
                format!(
                    "with this file the rule files hold {total} bytes, more than the \
                     {MAX_TOTAL_BYTES} (8 MiB) all rule files may hold together"
                ),
                "serve fewer or smaller rule files",
            ));
            return false;
        }
        self.files.push(file);
        true
    }
}

/// The text of the rule file at `path`; `None` when it no longer exists;
/// an error message and hint when it cannot be read as a rule file.
fn read_file(path: &Path) -> Result<Option<String>, (String, &'static str)> {
    const REMOVE: &str = "fix or remove it: every *.yaml and *.yml entry must be a rule file";
    read_bounded(path, MAX_FILE_BYTES).map_err(|problem| match problem {
        ReadProblem::TooLarge(bytes) => (limits::too_large("", bytes).message, LARGE_HINT),
        ReadProblem::NotUtf8(message) => (message, "save the file as UTF-8"),
        ReadProblem::Directory => ("is a directory, not a rule file".to_owned(), REMOVE),
        ReadProblem::Unreadable(message) => (message, REMOVE),
    })
}

/// Why a file could not be read as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReadProblem {
    /// Larger than the bound, this many bytes (or more).
    TooLarge(u64),
    /// Not UTF-8; the message names the offset.
    NotUtf8(String),
    /// A directory.
    Directory,
    /// A dangling or looping link, a FIFO, an I/O error.
    Unreadable(String),
}

/// The text of the regular file at `path`, read only when at most
/// `max_bytes` long; `None` when it does not exist. Never blocks on a FIFO
/// and never reads more than one byte past the bound, even when the file
/// grows meanwhile.
pub(crate) fn read_bounded(path: &Path, max_bytes: u64) -> Result<Option<String>, ReadProblem> {
    let link = std::fs::symlink_metadata(path);
    if link
        .as_ref()
        .is_err_and(|error| error.kind() == std::io::ErrorKind::NotFound)
    {
        return Ok(None);
    }
    let is_link = link.as_ref().is_ok_and(|m| m.file_type().is_symlink());
    // `metadata` follows symlinks: the kubelet's visible files are links
    // through `..data`.
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if is_link => {
            let target = std::fs::read_link(path)
                .map(|target| target.display().to_string())
                .unwrap_or_else(|_| "?".to_owned());
            let why = if error.kind() == std::io::ErrorKind::NotFound {
                "which does not exist".to_owned()
            } else {
                format!("which cannot be followed: {error}")
            };
            return Err(ReadProblem::Unreadable(format!(
                "symbolic link to {target} {why}"
            )));
        }
        Err(error) => {
            return Err(ReadProblem::Unreadable(format!(
                "cannot read the file: {error}"
            )));
        }
    };
    if metadata.is_dir() {
        return Err(ReadProblem::Directory);
    }
    if !metadata.is_file() {
        // A FIFO would block the reload forever on its first read.
        return Err(ReadProblem::Unreadable("is not a regular file".to_owned()));
    }
    if metadata.len() > max_bytes {
        return Err(ReadProblem::TooLarge(metadata.len()));
    }
    match open_regular(path, max_bytes) {
        Ok(Some(file)) => read_text(file, max_bytes).map(Some),
        Ok(None) => Ok(None),
        Err(problem) => Err(problem),
    }
}

/// The regular file at `path` opened for reading, when at most
/// `max_bytes` long; `None` when it does not exist. What [`read_bounded`]
/// checked before may have been replaced since (a FIFO renamed over the
/// file would block an open until a writer came): the open never blocks,
/// and what it opened is checked again.
fn open_regular(path: &Path, max_bytes: u64) -> Result<Option<std::fs::File>, ReadProblem> {
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
    {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => {
            return Err(ReadProblem::Unreadable(format!(
                "cannot read the file: {error}"
            )));
        }
    };
    match file.metadata() {
        Ok(opened) if opened.is_dir() => Err(ReadProblem::Directory),
        Ok(opened) if !opened.is_file() => {
            Err(ReadProblem::Unreadable("is not a regular file".to_owned()))
        }
        Ok(opened) if opened.len() > max_bytes => Err(ReadProblem::TooLarge(opened.len())),
        // Reading a regular file does not heed O_NONBLOCK.
        Ok(_) => Ok(Some(file)),
        Err(error) => Err(ReadProblem::Unreadable(format!(
            "cannot read the file: {error}"
        ))),
    }
}

/// The UTF-8 text `reader` holds, at most `max_bytes` long. Reads one byte
/// past the bound, never more, to notice a larger input (or a file growing
/// meanwhile); the size is checked before the text, so an input cut in the
/// middle of a character is refused for its size.
pub(crate) fn read_text(reader: impl std::io::Read, max_bytes: u64) -> Result<String, ReadProblem> {
    let mut bytes = Vec::new();
    reader
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|error| ReadProblem::Unreadable(format!("cannot read the file: {error}")))?;
    if bytes.len() as u64 > max_bytes {
        return Err(ReadProblem::TooLarge(bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|error| {
        ReadProblem::NotUtf8(format!(
            "not UTF-8 text: invalid byte at offset {}",
            error.utf8_error().valid_up_to()
        ))
    })
}

/// Reads the rule files named by `paths`: each a directory, read as
/// [`read_dir`] reads one, or a rule file, under the same bounds. A file that
/// does not exist is a diagnostic, as is any that cannot be read; only an
/// unreadable directory is an error.
pub fn read_paths(paths: &[PathBuf]) -> Result<DirRead, LoadError> {
    let mut read = DirRead::default();
    for path in paths {
        if path.is_dir() {
            if read_dir_into(path, &mut read)? {
                continue;
            }
            break;
        }
        let name = path.display().to_string();
        if read.files.len() >= MAX_FILES {
            read.diagnostics.push(too_many_files(&name));
            break;
        }
        match read_file(path) {
            Ok(Some(text)) => {
                if !read.push_within_total(SourceFile { name, text }) {
                    break;
                }
            }
            Ok(None) => read.diagnostics.push(at_start(
                &name,
                "no such rule file".to_owned(),
                "name a rule file or a directory of them",
            )),
            Err((message, hint)) => read.diagnostics.push(at_start(&name, message, hint)),
        }
    }
    Ok(read)
}

const LARGE_HINT: &str = "a ConfigMap holds at most 1 MiB; split the rules over several files";

/// Parsed rule files kept between reloads, so that a reload parses only
/// the files whose text changed.
///
/// Keyed by file name; an entry is used only when the text is exactly the
/// one parsed (compared in full, so a hash collision cannot serve stale
/// rules), and entries of files no longer read are dropped.
#[derive(Debug, Default)]
pub struct FileCache {
    entries: HashMap<String, Parsed>,
}

#[derive(Debug)]
struct Parsed {
    text: String,
    rule_sets: Vec<LoadedRuleSet>,
    diagnostics: Diagnostics,
    nodes: u64,
}

impl FileCache {
    /// Parses what `read` found, reusing the results of unchanged files.
    pub fn load(&mut self, read: DirRead) -> Loaded {
        let mut entries = HashMap::with_capacity(read.files.len());
        let mut loaded = Loaded {
            diagnostics: read.diagnostics,
            ..Loaded::default()
        };
        let mut total = 0;
        for file in &read.files {
            let parsed = match self.entries.remove(&file.name) {
                Some(parsed) if parsed.text == file.text => parsed,
                _ => {
                    let mut parsed = Parsed {
                        text: file.text.clone(),
                        rule_sets: Vec::new(),
                        diagnostics: Diagnostics::default(),
                        nodes: 0,
                    };
                    parsed.nodes = load_one(file, &mut parsed.rule_sets, &mut parsed.diagnostics);
                    parsed
                }
            };
            total += parsed.nodes;
            if total > MAX_TOTAL_NODES {
                // No file after it is read: dropped from the cache.
                loaded.diagnostics.push(too_many_nodes(file, total));
                break;
            }
            loaded.rule_sets.extend(parsed.rule_sets.iter().cloned());
            loaded
                .diagnostics
                .0
                .extend(parsed.diagnostics.iter().cloned());
            entries.insert(file.name.clone(), parsed);
        }
        self.entries = entries;
        loaded.files = read.files;
        loaded
    }
}

/// Parses rule files already in memory.
pub fn load_files(files: Vec<SourceFile>) -> Loaded {
    let mut loaded = Loaded::default();
    let mut total = 0;
    for file in &files {
        let mut rule_sets = Vec::new();
        total += load_one(file, &mut rule_sets, &mut loaded.diagnostics);
        if total > MAX_TOTAL_NODES {
            loaded.diagnostics.push(too_many_nodes(file, total));
            break;
        }
        loaded.rule_sets.append(&mut rule_sets);
    }
    loaded.files = files;
    loaded
}

/// The diagnostic of `file`, whose nodes bring the rule files read before
/// it and its own to `total`, over [`MAX_TOTAL_NODES`].
fn too_many_nodes(file: &SourceFile, total: u64) -> Diagnostic {
    at_start(
        &file.name,
        format!(
            "with this file the rule files hold {total} nodes, more than the \
             {MAX_TOTAL_NODES} all rule files may hold together"
        ),
        "serve fewer or smaller rule files; long lists are often better as a pattern \
         (matches) or a CEL expression",
    )
}

/// Parses one file's text (named `name` in diagnostics).
pub fn load_str(name: &str, text: &str) -> Loaded {
    load_files(vec![SourceFile {
        name: name.to_owned(),
        text: text.to_owned(),
    }])
}

/// Parses `file` into `out`, its problems into `diagnostics`; returns the
/// nodes it holds ([`limits::measure`]), 0 when it is not read.
fn load_one(file: &SourceFile, out: &mut Vec<LoadedRuleSet>, diagnostics: &mut Diagnostics) -> u64 {
    if file.text.trim().is_empty() {
        // Seen between the truncate and the write of an editor or `>`
        // redirection: serving it would silently drop the file's rule sets.
        diagnostics.push(Diagnostic {
            severity: Severity::Error,
            file: file.name.clone(),
            line: 1,
            column: 1,
            path: String::new(),
            message: "file is empty".to_owned(),
            hint: Some("delete the file to remove its rule sets".to_owned()),
        });
        return 0;
    }
    // Before any parser that expands aliases or slows down with depth.
    let nodes = match limits::measure(&file.name, &file.text) {
        Ok(nodes) => nodes,
        Err(diagnostic) => {
            diagnostics.push(diagnostic);
            return 0;
        }
    };
    let name: Arc<str> = Arc::from(file.name.as_str());
    let indexes = PositionIndex::build_all(&file.text);
    let mut documents = 0;
    for (doc_index, document) in serde_yaml::Deserializer::from_str(&file.text).enumerate() {
        let value = match serde_yaml::Value::deserialize(document) {
            Ok(value) => value,
            Err(error) => {
                // A syntax error ends the stream: later documents cannot be found.
                let (line, column) = error
                    .location()
                    .map(|l| (l.line(), l.column()))
                    .unwrap_or((0, 0));
                diagnostics.push(Diagnostic {
                    severity: Severity::Error,
                    file: file.name.clone(),
                    line,
                    column,
                    path: String::new(),
                    message: strip_location(&error.to_string()),
                    hint: Some("the file is not valid YAML".to_owned()),
                });
                return nodes;
            }
        };
        if value.is_null() {
            continue; // an empty document, e.g. a trailing `---`
        }
        documents += 1;
        let positions = Arc::new(indexes.get(doc_index).cloned().unwrap_or_default());
        let context = DocContext {
            file: &name,
            positions: &positions,
        };
        if let Some(what) = not_a_mapping(&value) {
            let position = positions.locate("");
            diagnostics.push(Diagnostic::error(
                &file.name,
                position.line,
                position.column,
                format!("the document is {what}, not a rule set"),
                &format!(
                    "{NOT_SHOWN}; a rule file holds mappings with apiVersion: \
                     kadmit.dev/v1alpha1, kind: RuleSet, metadata and spec"
                ),
            ));
            continue;
        }
        let shell: RuleSet<serde_yaml::Value, serde_yaml::Value> =
            match context.deserialize("", value, diagnostics) {
                Some(shell) => shell,
                None => continue,
            };
        let mut rules = Vec::with_capacity(shell.spec.rules.len());
        let mut rule_indices = Vec::with_capacity(shell.spec.rules.len());
        for (i, rule) in shell.spec.rules.into_iter().enumerate() {
            let prefix = format!("spec.rules[{i}]");
            if let Some(rule) = context.deserialize::<Rule>(&prefix, rule, diagnostics) {
                rules.push(rule);
                rule_indices.push(i);
            }
        }
        out.push(LoadedRuleSet {
            rule_set: RuleSet {
                api_version: shell.api_version,
                kind: shell.kind,
                metadata: shell.metadata,
                spec: super::RuleSetSpec {
                    failure_policy: shell.spec.failure_policy,
                    timeout_seconds: shell.spec.timeout_seconds,
                    namespace_selector: shell.spec.namespace_selector,
                    include: shell.spec.include,
                    when: shell
                        .spec
                        .when
                        .into_iter()
                        .enumerate()
                        .filter_map(|(i, condition)| {
                            context.deserialize(&format!("spec.when[{i}]"), condition, diagnostics)
                        })
                        .collect(),
                    match_conditions: shell.spec.match_conditions,
                    rules,
                },
            },
            file: name.clone(),
            positions,
            rule_indices,
        });
    }
    if documents == 0 {
        // Only comments and `---`: as good as empty, and as likely a file
        // caught half-written or emptied by mistake.
        diagnostics.push(Diagnostic {
            severity: Severity::Error,
            file: file.name.clone(),
            line: 1,
            column: 1,
            path: String::new(),
            message: "file holds no rule set, only comments or empty documents".to_owned(),
            hint: Some("delete the file to remove its rule sets".to_owned()),
        });
    }
    nodes
}

struct DocContext<'a> {
    file: &'a Arc<str>,
    positions: &'a PositionIndex,
}

impl DocContext<'_> {
    /// Deserializes `value` (found at `prefix`), reporting a failure with the
    /// full field path and its position.
    fn deserialize<T: DeserializeOwned>(
        &self,
        prefix: &str,
        value: serde_yaml::Value,
        diagnostics: &mut Diagnostics,
    ) -> Option<T> {
        match serde_path_to_error::deserialize::<_, T>(value) {
            Ok(parsed) => Some(parsed),
            Err(error) => {
                let inner = error.path().to_string();
                let mut path = field_path(prefix, &inner);
                let message = strip_location(&error.into_inner().to_string());
                // For an unknown field, point at the field itself.
                let mut hint = None;
                if let Some(field) = unknown_field(&message) {
                    let already = path == field || path.ends_with(&format!(".{field}"));
                    path = if already {
                        path
                    } else if path.is_empty() {
                        field.to_owned()
                    } else {
                        format!("{path}.{field}")
                    };
                    hint = Some("check the spelling; see schema/ruleset.schema.json".to_owned());
                }
                let position = self.positions.locate(&path);
                diagnostics.push(Diagnostic {
                    severity: Severity::Error,
                    file: self.file.to_string(),
                    line: position.line,
                    column: position.column,
                    path,
                    message,
                    hint,
                });
                None
            }
        }
    }
}

fn unknown_field(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("unknown field `")?;
    rest.split('`').next()
}

/// Why a document whose top is not a mapping is described, not quoted.
pub(crate) const NOT_SHOWN: &str = "its text is not shown, since a file named as one may be any file, a credentials file among them";

/// What a document's top value is when it is not a mapping (`a string of
/// 40 bytes`), without its text: a file named as a rule file or a suite may
/// be any file at all, and an error quoting it would print it.
pub(crate) fn not_a_mapping(value: &serde_yaml::Value) -> Option<String> {
    use serde_yaml::Value as Yaml;
    Some(match value {
        Yaml::Mapping(_) => return None,
        Yaml::String(text) => format!("a string of {} bytes", text.len()),
        Yaml::Sequence(items) => format!("a list of {} items", items.len()),
        Yaml::Number(_) => "a number".to_owned(),
        Yaml::Bool(_) => "a boolean".to_owned(),
        Yaml::Null => "empty".to_owned(),
        Yaml::Tagged(_) => "a tagged value".to_owned(),
    })
}

/// yaml errors append " at line L column C"; the diagnostic carries that already.
pub(crate) fn strip_location(message: &str) -> String {
    match message.find(" at line ") {
        Some(cut) => message[..cut].to_owned(),
        None => message.to_owned(),
    }
}

/// The field path of a serde error at `inner` (`.` for the value itself)
/// below `prefix` (`spec.rules[0]`), as diagnostics name fields.
pub(crate) fn field_path(prefix: &str, inner: &str) -> String {
    match (prefix.is_empty(), inner) {
        (_, ".") => prefix.to_owned(),
        (true, _) => inner.to_owned(),
        (false, _) if inner.starts_with('[') => format!("{prefix}{inner}"),
        (false, _) => format!("{prefix}.{inner}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_hash_is_what_sha256sum_prints() {
        let file = SourceFile {
            name: "a.yaml".to_owned(),
            text: "abc".to_owned(),
        };
        // `printf abc | sha256sum`
        assert_eq!(
            file.content_hash(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    const GOOD: &str = "\
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata:
  name: demo
spec:
  rules:
    - name: one
      match:
        resources: [pods]
      deny:
        - message: no
";

    #[test]
    fn loads_several_documents() {
        let text = format!("{GOOD}---\n{}", GOOD.replace("demo", "other"));
        let loaded = load_str("a.yaml", &text);
        assert!(loaded.diagnostics.is_empty(), "{}", loaded.diagnostics);
        let names: Vec<_> = loaded
            .rule_sets
            .iter()
            .map(|r| r.rule_set.metadata.name.as_str())
            .collect();
        assert_eq!(names, ["demo", "other"]);
    }

    #[test]
    fn reports_every_bad_rule_with_its_position() {
        let text = GOOD.replace("      deny:", "      denny:\n      deny:")
            + "    - name: two\n      match:\n        resources: [pods]\n        operations: [CREAT]\n";
        let loaded = load_str("a.yaml", &text);
        let printed: Vec<String> = loaded.diagnostics.iter().map(|d| d.to_string()).collect();
        assert_eq!(printed.len(), 2, "{printed:#?}");
        assert!(
            printed[0].starts_with("a.yaml:10:7: spec.rules[0].denny: unknown field `denny`"),
            "{}",
            printed[0]
        );
        assert!(
            printed[1].starts_with(
                "a.yaml:16:22: spec.rules[1].match.operations[0]: unknown variant `CREAT`"
            ),
            "{}",
            printed[1]
        );
    }

    #[test]
    fn reports_yaml_syntax_errors() {
        let loaded = load_str("bad.yaml", "a: [1, 2\nb: 3\n");
        assert_eq!(loaded.diagnostics.len(), 1);
        let d = &loaded.diagnostics.0[0];
        assert!(d.line > 0, "{d}");
        assert_eq!(d.file, "bad.yaml");
    }

    #[test]
    fn a_document_that_is_no_mapping_is_described_never_quoted() {
        // What a link to a credentials file would load.
        let token = "https://x-access-token:ghs_16C7e42F292c6912E@github.com";
        let cases = [
            (format!("{token}\n"), "a string of 55 bytes"),
            (format!("{GOOD}---\n- {token}\n- b\n"), "a list of 2 items"),
            (
                "-----BEGIN PRIVATE KEY-----\nMIIEvQ\n-----END PRIVATE KEY-----\n".to_owned(),
                "a string of",
            ),
        ];
        for (text, described) in cases {
            let loaded = load_str("creds.yaml", &text);
            let shown = loaded.diagnostics.to_string();
            assert_eq!(loaded.diagnostics.len(), 1, "{shown}");
            assert!(shown.contains(described), "{shown}");
            assert!(shown.contains("not a rule set"), "{shown}");
            assert!(
                !shown.contains("ghs_") && !shown.contains("MIIEvQ"),
                "{shown}"
            );
        }
        // The second document's place: its `---`.
        let loaded = load_str("creds.yaml", &format!("{GOOD}---\n- {token}\n"));
        assert_eq!(loaded.diagnostics.0[0].line, GOOD.lines().count() + 1);
    }

    #[test]
    fn an_empty_file_is_an_error_not_an_empty_rule_set() {
        let loaded = load_str("half-written.yaml", "");
        assert_eq!(loaded.diagnostics.len(), 1);
        assert_eq!(
            loaded.diagnostics.0[0].to_string(),
            "half-written.yaml:1:1: file is empty (delete the file to remove its rule sets)"
        );
    }

    #[test]
    fn a_file_of_only_comments_is_an_error_like_an_empty_one() {
        let loaded = load_str("cleared.yaml", "# all rules moved\n---\n# later\n---\n");
        assert_eq!(loaded.diagnostics.len(), 1);
        assert_eq!(
            loaded.diagnostics.0[0].to_string(),
            "cleared.yaml:1:1: file holds no rule set, only comments or empty documents (delete the file to remove its rule sets)"
        );
        // A trailing empty document beside a rule set is fine.
        let loaded = load_str("ok.yaml", &format!("{GOOD}---\n"));
        assert!(loaded.diagnostics.is_empty(), "{:?}", loaded.diagnostics);
        assert_eq!(loaded.rule_sets.len(), 1);
    }

    #[cfg(unix)]
    #[test]
    fn rule_files_are_found_whatever_the_case_of_their_extension() {
        let (_dir, read) = read_with(|dir| {
            std::fs::write(
                dir.join("policy.YAML"),
                GOOD.replace("name: demo", "name: upper"),
            )
            .expect("write");
            std::fs::write(dir.join("notes.txt"), "not a rule file").expect("write");
        });
        let names: Vec<&str> = read
            .files
            .iter()
            .filter_map(|f| Path::new(&f.name).file_name()?.to_str())
            .collect();
        assert_eq!(names, ["ok.yaml", "policy.YAML"]);
    }

    #[test]
    fn header_errors_name_the_field() {
        let loaded = load_str(
            "h.yaml",
            &GOOD.replace("kadmit.dev/v1alpha1", "kadmit.dev/v9"),
        );
        let d = &loaded.diagnostics.0[0];
        assert_eq!(d.path, "apiVersion");
        assert_eq!((d.line, d.column), (1, 1));
    }

    /// `dir` with `GOOD` as `ok.yaml`, plus whatever `setup` adds.
    #[cfg(unix)]
    fn read_with(setup: impl FnOnce(&Path)) -> (tempfile::TempDir, DirRead) {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("ok.yaml"), GOOD).expect("write");
        setup(dir.path());
        let read = read_dir(dir.path()).expect("the directory reads");
        (dir, read)
    }

    #[cfg(unix)]
    #[test]
    fn entries_named_like_rule_files_that_cannot_be_read_are_errors() {
        use std::os::unix::fs::symlink;
        // (what, how the entry is made, the start of its diagnostic)
        type Case<'a> = (&'a str, &'a dyn Fn(&Path), &'a str);
        let cases: [Case; 6] = [
            (
                "dangling link",
                &|dir| symlink("gone.yaml", dir.join("10-pod-security.yaml")).expect("link"),
                "10-pod-security.yaml:1:1: symbolic link to gone.yaml which does not exist (fix or remove it",
            ),
            (
                "link loop",
                &|dir| {
                    symlink("b.yaml", dir.join("a.yaml")).expect("link");
                    symlink("a.yaml", dir.join("b.yaml")).expect("link");
                },
                "a.yaml:1:1: symbolic link to b.yaml which cannot be followed:",
            ),
            (
                "directory",
                &|dir| std::fs::create_dir(dir.join("rules.yml")).expect("mkdir"),
                "rules.yml:1:1: is a directory, not a rule file",
            ),
            (
                "FIFO",
                &|dir| {
                    // Reading it would block the reload until a writer came.
                    let made = std::process::Command::new("mkfifo")
                        .arg(dir.join("pipe.yaml"))
                        .status()
                        .expect("run mkfifo");
                    assert!(made.success(), "mkfifo failed");
                },
                "pipe.yaml:1:1: is not a regular file",
            ),
            (
                "not UTF-8",
                &|dir| std::fs::write(dir.join("latin1.yaml"), b"a: \xe9\n").expect("write"),
                "latin1.yaml:1:1: not UTF-8 text: invalid byte at offset 3",
            ),
            (
                "too large",
                &|dir| {
                    let file = std::fs::File::create(dir.join("big.yaml")).expect("create");
                    file.set_len(MAX_FILE_BYTES + 1).expect("grow");
                },
                "big.yaml:1:1: file is 1048577 bytes, more than the limit of 1048576",
            ),
        ];
        for (what, setup, expected) in cases {
            let (_dir, read) = read_with(setup);
            assert_eq!(read.files.len(), 1, "{what}: ok.yaml is still read");
            let printed = read.diagnostics.to_string();
            assert!(!read.diagnostics.is_empty(), "{what}: no diagnostic");
            assert!(
                read.diagnostics
                    .iter()
                    .all(|d| d.line == 1 && d.column == 1),
                "{what}: {printed}"
            );
            let first = read.diagnostics.0[0].to_string();
            let at = first.rfind(std::path::MAIN_SEPARATOR).map_or(0, |i| i + 1);
            assert!(first[at..].starts_with(expected), "{what}: {printed}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn hidden_entries_and_other_names_are_skipped() {
        use std::os::unix::fs::symlink;
        let (_dir, read) = read_with(|dir| {
            // The kubelet's layout, with a dangling hidden link as left
            // between two of its steps, and files that are not rule files.
            std::fs::create_dir(dir.join("..2026_11_23_18_00_00.000000001")).expect("mkdir");
            symlink("..2026_11_23_18_00_00.000000001", dir.join("..data")).expect("link");
            symlink("..gone", dir.join("..data_tmp")).expect("link");
            symlink("gone", dir.join("README.md")).expect("link");
            std::fs::write(dir.join(".hidden.yaml"), "not: [valid").expect("write");
        });
        // Not read, and none holds rules to warn about.
        assert!(read.diagnostics.is_empty(), "{}", read.diagnostics);
        assert_eq!(read.files.len(), 1);
    }

    #[test]
    fn the_cache_parses_only_changed_files() {
        let file = |name: &str, text: &str| SourceFile {
            name: name.to_owned(),
            text: text.to_owned(),
        };
        let read = |files: Vec<SourceFile>| DirRead {
            files,
            diagnostics: Diagnostics::default(),
        };
        let mut cache = FileCache::default();
        let first = cache.load(read(vec![file("a.yaml", GOOD), file("b.yaml", GOOD)]));
        assert_eq!(first.rule_sets.len(), 2);
        let kept = Arc::clone(&first.rule_sets[0].positions);
        let changed = GOOD.replace("demo", "renamed");
        let second = cache.load(read(vec![file("a.yaml", GOOD), file("b.yaml", &changed)]));
        assert!(
            Arc::ptr_eq(&kept, &second.rule_sets[0].positions),
            "a.yaml was parsed again"
        );
        assert_eq!(second.rule_sets[1].rule_set.metadata.name, "renamed");
        // A removed file is forgotten; a bad one keeps its diagnostics.
        let third = cache.load(read(vec![file("b.yaml", "a: [")]));
        assert_eq!(third.rule_sets.len(), 0);
        assert_eq!(third.diagnostics.len(), 1);
        assert_eq!(
            cache.load(read(vec![file("b.yaml", "a: [")])).diagnostics,
            third.diagnostics
        );
        assert_eq!(cache.entries.len(), 1);
    }

    #[test]
    fn files_beyond_the_limits_are_not_deserialized() {
        let refs = vec!["*a"; 2000].join(", ");
        let loaded = load_str("laughs.yaml", &format!("a: &a [1, 2]\nb: [{refs}]\n"));
        assert_eq!(loaded.rule_sets.len(), 0);
        assert_eq!(loaded.diagnostics.len(), 1, "{}", loaded.diagnostics);
        assert!(
            loaded.diagnostics.0[0]
                .to_string()
                .starts_with("laughs.yaml:2:"),
            "{}",
            loaded.diagnostics
        );
    }

    /// A rule set named `name` whose one rule denies `items` values.
    fn long_list(name: &str, items: usize) -> SourceFile {
        SourceFile {
            name: format!("{name}.yaml"),
            text: format!(
                "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata:\n  name: {name}\nspec:\n  rules:\n    - name: r\n      match: {{resources: [pods]}}\n      deny:\n        - path: $.object.a\n          message: m\n          in: [{}]\n",
                vec!["0"; items].join(",")
            ),
        }
    }

    #[test]
    fn all_rule_files_together_hold_at_most_the_total_of_nodes() {
        let files = || {
            vec![
                long_list("a", 90_000),
                long_list("b", 90_000),
                long_list("c", 90_000),
            ]
        };
        let expected = "c.yaml:1:1: with this file the rule files hold 270090 nodes, more than the \
                        250000 all rule files may hold together (";
        let loaded = load_files(files());
        let names: Vec<_> = loaded
            .rule_sets
            .iter()
            .map(|set| set.rule_set.metadata.name.clone())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(loaded.diagnostics.len(), 1, "{}", loaded.diagnostics);
        assert!(
            loaded.diagnostics.to_string().starts_with(expected),
            "{}",
            loaded.diagnostics
        );
        // A reload reusing parsed files counts them the same, and counts
        // again once a file is removed.
        let mut cache = FileCache::default();
        for _ in 0..2 {
            let loaded = cache.load(DirRead {
                files: files(),
                diagnostics: Diagnostics::default(),
            });
            assert_eq!(loaded.rule_sets.len(), 2);
            assert!(
                loaded.diagnostics.to_string().starts_with(expected),
                "{}",
                loaded.diagnostics
            );
        }
        let loaded = cache.load(DirRead {
            files: files().split_off(1),
            diagnostics: Diagnostics::default(),
        });
        assert_eq!(loaded.rule_sets.len(), 2);
        assert!(loaded.diagnostics.is_empty(), "{}", loaded.diagnostics);
    }

    #[cfg(unix)]
    #[test]
    fn a_directory_of_more_files_than_the_bound_is_not_read() {
        let (dir, read) = read_with(|dir| {
            for i in 0..MAX_FILES {
                std::fs::write(dir.join(format!("{i:04}.yaml")), "# x\n").expect("write");
            }
            std::fs::write(dir.join("notes.txt"), "not a rule file").expect("write");
        });
        assert!(read.files.is_empty(), "{} files read", read.files.len());
        assert_eq!(
            read.diagnostics.to_string(),
            format!(
                "{}:1:1: more than 1000 rule files (serve fewer rule files; each may hold many rule sets)",
                dir.path().display()
            )
        );
        // Exactly the bound is read.
        std::fs::remove_file(dir.path().join("ok.yaml")).expect("remove");
        let read = read_dir(dir.path()).expect("the directory reads");
        assert_eq!(read.files.len(), MAX_FILES);
        assert!(read.diagnostics.is_empty(), "{}", read.diagnostics);
    }

    #[cfg(unix)]
    #[test]
    fn rule_files_together_hold_at_most_the_total_of_bytes() {
        // Nine files of 1 MiB of comments, after `ok.yaml`.
        let comments = format!("# {}\n", "x".repeat((1 << 20) - 3));
        let (dir, read) = read_with(|dir| {
            for i in 0..9 {
                std::fs::write(dir.join(format!("z{i}.yaml")), &comments).expect("write");
            }
        });
        let names: Vec<_> = read
            .files
            .iter()
            .map(|file| file.name.rsplit('/').next().unwrap_or_default().to_owned())
            .collect();
        assert_eq!(
            names,
            [
                "ok.yaml", "z0.yaml", "z1.yaml", "z2.yaml", "z3.yaml", "z4.yaml", "z5.yaml",
                "z6.yaml"
            ]
        );
        let total = GOOD.len() + 8 * comments.len();
        assert_eq!(
            read.diagnostics.to_string(),
            format!(
                "{}:1:1: with this file the rule files hold {total} bytes, more than the 8388608 (8 MiB) \
                 all rule files may hold together (serve fewer or smaller rule files)",
                dir.path().join("z7.yaml").display()
            )
        );
        // The same over paths named one by one, and across directories.
        let paths: Vec<PathBuf> = std::iter::once(dir.path().join("ok.yaml"))
            .chain((0..9).map(|i| dir.path().join(format!("z{i}.yaml"))))
            .collect();
        let read = read_paths(&paths).expect("reads");
        assert_eq!(read.files.len(), 8);
        assert_eq!(read.diagnostics.len(), 1, "{}", read.diagnostics);
        let read = read_paths(&[dir.path().to_owned(), dir.path().to_owned()]).expect("reads");
        assert_eq!(read.files.len(), 8);
        assert_eq!(read.diagnostics.len(), 1, "{}", read.diagnostics);
    }

    #[test]
    fn a_fifo_put_in_place_after_the_check_is_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pipe = dir.path().join("pipe.yaml");
        let made = std::process::Command::new("mkfifo")
            .arg(&pipe)
            .status()
            .expect("run mkfifo");
        assert!(made.success(), "mkfifo failed");
        // The open that follows the type check, as if the FIFO had been
        // renamed over a rule file between the two: a plain open blocks
        // until a writer comes, so it runs on a thread with a deadline.
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = sender.send(open_regular(&pipe, MAX_FILE_BYTES).map(|file| file.is_some()));
        });
        let opened = receiver
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("the open blocked");
        assert_eq!(
            opened,
            Err(ReadProblem::Unreadable("is not a regular file".to_owned()))
        );
    }

    #[test]
    fn entries_that_look_meant_as_rule_files_are_warned_about() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in [
            ".pod-security.yaml",
            "pod-security",
            "notes.txt",
            "..data_x.yaml",
        ] {
            std::fs::write(
                dir.path().join(name),
                "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\n",
            )
            .expect("write");
        }
        // Files that are not rules, whatever their names.
        std::fs::write(dir.path().join("README"), "# Rules\n").expect("write");
        std::fs::write(dir.path().join(".notes.yaml"), "a: 1\n").expect("write");
        std::os::unix::fs::symlink("user@host.123", dir.path().join(".#a.yaml")).expect("link");
        std::fs::create_dir(dir.path().join("subdir")).expect("mkdir");
        let read = read_dir(dir.path()).expect("read");
        assert!(read.files.is_empty());
        assert!(!read.diagnostics.has_errors(), "{}", read.diagnostics);
        let mut printed: Vec<String> = read.diagnostics.iter().map(|d| d.to_string()).collect();
        printed.sort();
        assert_eq!(printed.len(), 2, "{printed:?}");
        assert!(
            printed[0].ends_with(
                ".pod-security.yaml:1:1: warning: hidden file, not read \
                 (rename it without the leading dot if it holds rules)"
            ),
            "{printed:?}"
        );
        assert!(
            printed[1].contains("pod-security:1:1: warning: no extension, not read"),
            "{printed:?}"
        );
    }
}
