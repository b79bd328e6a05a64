//! Reading a suite file: the bounds first, then the document with the
//! position of every field, then every object it names, each problem a
//! [`Diagnostic`] and all of them reported at once.

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};

use serde::Deserialize as _;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{
    Case, Expect, MAX_CASES, MAX_OBJECT_BYTES, MAX_SUITE_INPUT_BYTES, MAX_SUITE_OBJECT_BYTES,
    SUITE_SUFFIXES,
};
use super::{Suite, SuiteMetadata};
use crate::review::{self, Embedded, MAX_PARSED_BYTES, Operation, Request};
use crate::rules::limits::{self, MAX_FILE_BYTES};
use crate::rules::{
    Diagnostic, Diagnostics, NOT_SHOWN, PositionIndex, ReadProblem, Severity, not_a_mapping,
    read_bounded, strip_location,
};
use crate::simulate::{
    InputError, ObjectOptions, check_parsed_size, check_parsed_text, refuse_list,
    request_for_object,
};

/// A suite read and checked: its rule paths and its cases, each input
/// already turned into the request the API server would send.
#[derive(Debug, Clone)]
pub struct LoadedSuite {
    /// The suite's name: `metadata.name`, or the file name without
    /// `.suite.yaml`.
    pub name: String,
    /// The suite file, as named when loading.
    pub file: String,
    /// The rule files and directories, resolved against the suite's
    /// directory.
    pub rules: Vec<PathBuf>,
    /// The cases, in file order.
    pub cases: Vec<LoadedCase>,
}

/// One case, ready to run.
#[derive(Debug, Clone)]
pub struct LoadedCase {
    /// The case's name.
    pub name: String,
    /// 1-based line of the case in the suite file.
    pub line: usize,
    /// 1-based column of the case in the suite file.
    pub column: usize,
    /// The request the case sends.
    pub request: Request,
    /// Only this rule set, and the diagnostic to report when the rules hold
    /// none of that name.
    pub rule_set: Option<(String, Diagnostic)>,
    /// What must happen; `patchedFile` is already read into `patched`.
    pub expect: Expect,
}

/// Reads the suite file at `path` and every file its cases name.
///
/// The suite file passes the size, depth and alias bounds of rule files
/// ([`limits::check`]) before it is parsed, holds at most [`MAX_CASES`]
/// cases, and every object it holds or names is at most
/// [`MAX_OBJECT_BYTES`] (files under the same depth and alias bounds), at
/// most [`MAX_SUITE_INPUT_BYTES`] of files in all. Every problem found is
/// returned, each at its `file:line:column`.
pub fn load(path: &Path) -> Result<LoadedSuite, Diagnostics> {
    let file = path.display().to_string();
    let at_start = |message: String, hint: &str| {
        Diagnostics(vec![Diagnostic {
            severity: Severity::Error,
            file: file.clone(),
            line: 1,
            column: 1,
            path: String::new(),
            message,
            hint: Some(hint.to_owned()),
        }])
    };
    let text = match read_bounded(path, MAX_FILE_BYTES) {
        Ok(Some(text)) => text,
        Ok(None) => return Err(at_start("no such suite file".to_owned(), "check the path")),
        Err(ReadProblem::TooLarge(bytes)) => {
            return Err(at_start(
                format!("file is {bytes} bytes, more than the limit of {MAX_FILE_BYTES} (1 MiB)"),
                "split the cases over several suite files",
            ));
        }
        Err(ReadProblem::Directory) => {
            return Err(at_start(
                "is a directory, not a suite file".to_owned(),
                "kadmit verify reads the *.suite.yaml files below a directory it is given",
            ));
        }
        Err(ReadProblem::NotUtf8(message)) => {
            return Err(at_start(message, "save the file as UTF-8"));
        }
        Err(ReadProblem::Unreadable(message)) => {
            return Err(at_start(message, "check the path"));
        }
    };
    if text.trim().is_empty() {
        return Err(at_start(
            "file is empty".to_owned(),
            "a suite names rule files and cases; see schema/suite.schema.json",
        ));
    }
    // Before any parser that expands aliases or slows down with depth.
    if let Some(diagnostic) = limits::check(&file, &text) {
        return Err(Diagnostics(vec![diagnostic]));
    }
    let value = parse_one_document(&file, &text)?;
    let positions = PositionIndex::build_all(&text)
        .into_iter()
        .next()
        .unwrap_or_default();
    let base = path.parent().unwrap_or(Path::new("")).to_owned();
    // Where the suite's directory really is, to tell a link that leads out
    // of it; `None` when that cannot be found out (then no link is followed).
    let real_base = if base.as_os_str().is_empty() {
        Path::new(".")
    } else {
        &base
    }
    .canonicalize()
    .ok();
    let mut reader = Reader {
        file: &file,
        positions: &positions,
        base: &base,
        real_base: real_base.as_deref(),
        diagnostics: Diagnostics::default(),
        objects: HashMap::new(),
        read_bytes: 0,
        held_bytes: 0,
    };
    let Some(shell) = reader.deserialize::<Suite<serde_yaml::Value>>("", value) else {
        return Err(reader.diagnostics);
    };
    if shell.cases.len() > MAX_CASES {
        reader.error(
            &format!("cases[{MAX_CASES}]"),
            format!(
                "{} cases, more than the limit of {MAX_CASES}",
                shell.cases.len()
            ),
            "split the cases over several suite files",
        );
        return Err(reader.diagnostics);
    }
    if shell.cases.is_empty() {
        reader.error(
            "cases",
            "the suite has no cases".to_owned(),
            "a suite that checks nothing would pass; add cases, or delete the file",
        );
    }
    let rules = reader.rule_paths(&shell.rules);
    let mut names = HashSet::new();
    let mut cases = Vec::with_capacity(shell.cases.len());
    for (i, case) in shell.cases.into_iter().enumerate() {
        let prefix = format!("cases[{i}]");
        let Some(case) = reader.deserialize::<Case>(&prefix, case) else {
            continue;
        };
        if case.name.trim().is_empty() {
            reader.error(
                &format!("{prefix}.name"),
                "the case has no name".to_owned(),
                "name every case; failures are reported by name",
            );
        } else if !names.insert(case.name.clone()) {
            reader.error(
                &format!("{prefix}.name"),
                format!("duplicate case name {:?}", case.name),
                "give every case of a suite its own name",
            );
        }
        if let Some(case) = reader.case(&prefix, case) {
            cases.push(case);
        }
    }
    if !reader.diagnostics.is_empty() {
        return Err(reader.diagnostics);
    }
    let name = match shell.metadata {
        Some(SuiteMetadata { name, .. }) => name,
        None => suite_name(path),
    };
    Ok(LoadedSuite {
        name,
        file,
        rules,
        cases,
    })
}

/// The file name of `path` without its suite suffix (or extension).
fn suite_name(path: &Path) -> String {
    let file_name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    for suffix in SUITE_SUFFIXES.iter().chain(&[".yaml", ".yml"]) {
        if let Some(stem) = file_name.strip_suffix(suffix) {
            return stem.to_owned();
        }
    }
    file_name
}

/// The one document of a suite file.
fn parse_one_document(file: &str, text: &str) -> Result<serde_yaml::Value, Diagnostics> {
    let mut found = None;
    for document in serde_yaml::Deserializer::from_str(text) {
        let value = match serde_yaml::Value::deserialize(document) {
            Ok(value) => value,
            Err(error) => return Err(Diagnostics(vec![yaml_error(file, &error)])),
        };
        if value.is_null() {
            continue; // an empty document, e.g. a leading `---`
        }
        if found.is_some() {
            return Err(Diagnostics(vec![Diagnostic {
                severity: Severity::Error,
                file: file.to_owned(),
                line: 1,
                column: 1,
                path: String::new(),
                message: "more than one document".to_owned(),
                hint: Some("write one suite per file".to_owned()),
            }]));
        }
        if let Some(what) = not_a_mapping(&value) {
            return Err(Diagnostics(vec![Diagnostic::error(
                file,
                1,
                1,
                format!("the document is {what}, not a suite"),
                &format!(
                    "{NOT_SHOWN}; a suite holds a mapping with apiVersion: kadmit.dev/v1alpha1, \
                     kind: Suite, rules and cases"
                ),
            )]));
        }
        found = Some(value);
    }
    found.ok_or_else(|| {
        Diagnostics(vec![Diagnostic {
            severity: Severity::Error,
            file: file.to_owned(),
            line: 1,
            column: 1,
            path: String::new(),
            message: "file is empty".to_owned(),
            hint: Some("a suite names rule files and cases".to_owned()),
        }])
    })
}

fn yaml_error(file: &str, error: &serde_yaml::Error) -> Diagnostic {
    let (line, column) = error
        .location()
        .map(|l| (l.line(), l.column()))
        .unwrap_or((1, 1));
    Diagnostic::error(
        file,
        line,
        column,
        strip_location(&error.to_string()),
        "the file is not valid YAML",
    )
}

/// Reads one suite: positions for diagnostics, and the object files its
/// cases name, each read once.
struct Reader<'a> {
    file: &'a str,
    positions: &'a PositionIndex,
    base: &'a Path,
    /// `base` with its links resolved, when that could be done.
    real_base: Option<&'a Path>,
    diagnostics: Diagnostics,
    /// Object files read so far, by resolved path; `None` for one that
    /// could not be used (already reported).
    objects: HashMap<PathBuf, Option<Stored>>,
    read_bytes: u64,
    /// What the objects named so far take in memory, each file counted
    /// once read and each case's copy once more ([`MAX_SUITE_OBJECT_BYTES`]).
    held_bytes: u64,
}

/// An object file, read once per suite however many cases name it.
struct Stored {
    /// The object, parsed.
    value: Value,
    /// What a request holds of it, made when a case first sends it.
    sent: Option<Sent>,
}

/// An object as a case's request holds it.
///
/// A request owns its objects, so each case holds a copy: the object's
/// JSON text, which the evaluation parses when the case runs, not the
/// parsed object, which takes many times more (a map of one key takes 8
/// bytes of JSON and about 700 parsed: six cases naming one file of 325
/// aliases of 250 maps took 430 MB holding it parsed, 110 MB as text).
#[derive(Clone)]
struct Sent {
    /// The JSON text, or the object itself when the text would not read
    /// back as the same value (a float serde_json does not read back
    /// exactly, nesting serde_json does not read).
    embedded: Embedded,
    /// What `embedded` takes: the text's length, or the parsed size.
    held: usize,
    /// What the object may take once parsed, estimated from its JSON as
    /// [`check_parsed_size`] estimates it.
    estimate: usize,
    /// The members [`request_for_object`] reads of the object:
    /// `apiVersion`, `kind`, `metadata.name`, `metadata.namespace`.
    head: Value,
    /// Whether [`refuse_list`] refuses the object.
    is_list: bool,
}

/// `value` as a request holds it ([`Sent`]).
fn sent(value: &Value) -> Result<Sent, serde_json::Error> {
    let text = serde_json::value::to_raw_value(value)?;
    let estimate = review::parsed_size_estimate(text.get().as_bytes());
    let reads_back = !may_not_read_back(value)
        || serde_json::from_str::<Value>(text.get()).is_ok_and(|back| back == *value);
    let (embedded, held) = if reads_back {
        let held = text.get().len();
        (Embedded::Raw(text), held)
    } else {
        (Embedded::Parsed(value.clone()), review::parsed_size(value))
    };
    Ok(Sent {
        embedded,
        held,
        estimate,
        head: head(value),
        is_list: refuse_list(value).is_err(),
    })
}

/// True when `value` holds a float, or nests deeper than 64 levels: its
/// JSON text is then read back to tell whether it gives the same value.
fn may_not_read_back(value: &Value) -> bool {
    let mut pending = vec![(value, 0_usize)];
    while let Some((value, depth)) = pending.pop() {
        match value {
            Value::Number(number) if number.is_f64() => return true,
            Value::Array(items) => {
                if depth >= 64 {
                    return true;
                }
                pending.extend(items.iter().map(|item| (item, depth + 1)));
            }
            Value::Object(map) => {
                if depth >= 64 {
                    return true;
                }
                pending.extend(map.values().map(|item| (item, depth + 1)));
            }
            _ => {}
        }
    }
    false
}

/// The members of `object` [`request_for_object`] reads, when they are
/// strings (it reads no other kind of value).
fn head(object: &Value) -> Value {
    let text = |value: Option<&Value>| value.filter(|value| value.is_string()).cloned();
    let mut head = serde_json::Map::new();
    for key in ["apiVersion", "kind"] {
        if let Some(value) = text(object.get(key)) {
            head.insert(key.to_owned(), value);
        }
    }
    if let Some(metadata) = object.get("metadata") {
        let mut kept = serde_json::Map::new();
        for key in ["name", "namespace"] {
            if let Some(value) = text(metadata.get(key)) {
                kept.insert(key.to_owned(), value);
            }
        }
        head.insert("metadata".to_owned(), Value::Object(kept));
    }
    Value::Object(head)
}

/// The request [`request_for_object`] builds of `object` (and `old`), with
/// the objects as `object` and `old` hold them, refused as it and
/// [`refuse_list`] refuse them. `options.old` is not read.
fn request_of(
    object: Sent,
    old: Option<Sent>,
    options: &ObjectOptions,
) -> Result<Request, InputError> {
    if object.is_list {
        return Err(InputError::List);
    }
    let size = object
        .estimate
        .saturating_add(old.as_ref().map_or(0, |old| old.estimate));
    if size > MAX_PARSED_BYTES {
        return Err(InputError::TooLargeParsed(size));
    }
    let head_only = ObjectOptions {
        old: None,
        ..options.clone()
    };
    let mut request = request_for_object(object.head, &head_only)?;
    // The head is the object (or, on DELETE, the old object): the object
    // itself takes its place.
    if request.object.is_some() {
        request.object = Some(object.embedded);
        request.old_object = old.map(|old| old.embedded);
    } else {
        request.old_object = Some(object.embedded);
    }
    Ok(request)
}

/// The request of an AdmissionReview, or what is wrong and a hint.
fn decode_review(review: &Value) -> Result<Request, (String, &'static str)> {
    if let Err(error) = check_parsed_size([review]) {
        return Err((error.to_string(), "give a smaller review"));
    }
    serde_json::to_vec(review)
        .map_err(|error| error.to_string())
        .and_then(|bytes| review::decode(&bytes).map_err(|error| error.to_string()))
        .map(|decoded| decoded.request)
        .map_err(|message| {
            (
                format!("the review does not decode: {message}"),
                "give an admission.k8s.io/v1 or v1beta1 AdmissionReview with a request",
            )
        })
}

impl Reader<'_> {
    fn diagnostic(&self, path: &str, message: String, hint: &str) -> Diagnostic {
        let position = self.positions.locate(path);
        Diagnostic {
            severity: Severity::Error,
            file: self.file.to_owned(),
            line: position.line,
            column: position.column,
            path: path.to_owned(),
            message,
            hint: Some(hint.to_owned()),
        }
    }

    fn error(&mut self, path: &str, message: String, hint: &str) {
        let diagnostic = self.diagnostic(path, message, hint);
        self.diagnostics.push(diagnostic);
    }

    /// Deserializes `value` (found at `prefix`), reporting a failure with
    /// the full field path and its position.
    fn deserialize<T: DeserializeOwned>(
        &mut self,
        prefix: &str,
        value: serde_yaml::Value,
    ) -> Option<T> {
        let error = match serde_path_to_error::deserialize::<_, T>(value) {
            Ok(parsed) => return Some(parsed),
            Err(error) => error,
        };
        let inner = error.path().to_string();
        let mut path = crate::rules::field_path(prefix, &inner);
        let message = strip_location(&error.into_inner().to_string());
        let mut hint = "see schema/suite.schema.json";
        if let Some(field) = message
            .strip_prefix("unknown field `")
            .and_then(|rest| rest.split('`').next())
        {
            // Point at the field itself.
            if path != field && !path.ends_with(&format!(".{field}")) {
                path = if path.is_empty() {
                    field.to_owned()
                } else {
                    format!("{path}.{field}")
                };
            }
            hint = "check the spelling; see schema/suite.schema.json";
        }
        self.error(&path, message, hint);
        None
    }

    /// The rule paths, resolved; each must exist.
    fn rule_paths(&mut self, rules: &[String]) -> Vec<PathBuf> {
        if rules.is_empty() {
            self.error(
                "rules",
                "no rule files named".to_owned(),
                "name rule files or directories, relative to the suite file",
            );
        }
        let mut paths = Vec::with_capacity(rules.len());
        for (i, rule) in rules.iter().enumerate() {
            let path = self.base.join(rule);
            if !path.exists() {
                self.error(
                    &format!("rules[{i}]"),
                    format!("no such file or directory: {}", path.display()),
                    "paths are relative to the suite file",
                );
            }
            paths.push(path);
        }
        paths
    }

    /// Checks a case and turns its input into a request.
    fn case(&mut self, prefix: &str, case: Case) -> Option<LoadedCase> {
        let before = self.diagnostics.len();
        let field = |name: &str| format!("{prefix}.{name}");
        let inputs = [
            ("object", case.object.is_some()),
            ("objectFile", case.object_file.is_some()),
            ("review", case.review.is_some()),
            ("reviewFile", case.review_file.is_some()),
        ];
        let given: Vec<&str> = inputs
            .iter()
            .filter(|(_, given)| *given)
            .map(|(name, _)| *name)
            .collect();
        if given.len() != 1 {
            let message = if given.is_empty() {
                "the case has no input".to_owned()
            } else {
                format!("the case has {} inputs: {}", given.len(), given.join(", "))
            };
            self.error(
                prefix,
                message,
                "give exactly one of object, objectFile, review and reviewFile",
            );
        }
        if case.old_object.is_some() && case.old_object_file.is_some() {
            self.error(
                &field("oldObjectFile"),
                "both oldObject and oldObjectFile are given".to_owned(),
                "give one of them",
            );
        }
        let is_review = case.review.is_some() || case.review_file.is_some();
        if is_review {
            let request_fields = [
                ("operation", case.operation.is_some()),
                ("oldObject", case.old_object.is_some()),
                ("oldObjectFile", case.old_object_file.is_some()),
                ("namespace", case.namespace.is_some()),
                ("resource", case.resource.is_some()),
                ("subResource", case.sub_resource.is_some()),
                ("user", case.user.is_some()),
                ("groups", case.groups.is_some()),
            ];
            for (name, _) in request_fields.iter().filter(|(_, given)| *given) {
                self.error(
                    &field(name),
                    format!("{name} is given with a review, which carries its own request"),
                    "edit the review, or give the object with object or objectFile",
                );
            }
        } else if (case.old_object.is_some() || case.old_object_file.is_some())
            && case.operation != Some(Operation::Update)
        {
            let name = if case.old_object.is_some() {
                "oldObject"
            } else {
                "oldObjectFile"
            };
            self.error(
                &field(name),
                "an old object is given for an operation other than UPDATE".to_owned(),
                "set operation: UPDATE, or remove the old object",
            );
        }
        let expect = self.expect(&field("expect"), case.expect);
        if self.diagnostics.len() > before {
            return None;
        }

        let old = match (&case.old_object, &case.old_object_file) {
            (Some(object), _) => self.inline_sent(&field("oldObject"), object.clone()),
            (None, Some(file)) => self.object_file_sent(&field("oldObjectFile"), file),
            (None, None) => None,
        };
        let request = if let Some(review) = &case.review {
            let path = field("review");
            self.inline(&path, review.clone(), true)
                .and_then(|review| self.review(&path, decode_review(&review)))
        } else if let Some(file) = &case.review_file {
            self.review_file(&field("reviewFile"), file)
        } else {
            let (name, object) = match (&case.object, &case.object_file) {
                (Some(object), _) => ("object", self.inline_sent(&field("object"), object.clone())),
                (None, Some(file)) => (
                    "objectFile",
                    self.object_file_sent(&field("objectFile"), file),
                ),
                (None, None) => return None,
            };
            let defaults = ObjectOptions::default();
            let options = ObjectOptions {
                operation: case.operation.unwrap_or(Operation::Create),
                old: None,
                user: case.user.clone().unwrap_or(defaults.user),
                groups: case.groups.clone().unwrap_or(defaults.groups),
                namespace: case.namespace.clone(),
                resource: case.resource.clone(),
                sub_resource: case.sub_resource.clone(),
            };
            object.and_then(|object| match request_of(object, old, &options) {
                Ok(request) => Some(request),
                Err(error) => {
                    let hint = match error {
                        InputError::TooLargeParsed(_) => "give a smaller object",
                        InputError::List => "give one object per case",
                        _ => "give a Kubernetes object with apiVersion, kind and metadata",
                    };
                    self.error(&field(name), error.to_string(), hint);
                    None
                }
            })
        };
        let request = request?;
        let rule_set = case.rule_set.map(|name| {
            let diagnostic = self.diagnostic(
                &field("ruleSet"),
                format!("no rule set named {name:?} in the suite's rules"),
                "name a rule set's metadata.name",
            );
            (name, diagnostic)
        });
        let position = self.positions.locate(prefix);
        Some(LoadedCase {
            name: case.name,
            line: position.line,
            column: position.column,
            request,
            rule_set,
            expect,
        })
    }

    /// Checks an expectation and reads its `patchedFile`.
    fn expect(&mut self, prefix: &str, mut expect: Expect) -> Expect {
        let field = |name: &str| format!("{prefix}.{name}");
        let checks_something = expect.allowed.is_some()
            || expect.denies.is_some()
            || expect.warns.is_some()
            || expect
                .messages
                .as_ref()
                .is_some_and(|texts| !texts.is_empty())
            || expect.patched.is_some()
            || expect.patched_file.is_some()
            || expect.patch.is_some();
        if !checks_something {
            self.error(
                prefix,
                "the expectation checks nothing".to_owned(),
                "give allowed, denies, warns, messages, patched, patchedFile or patch",
            );
        }
        if expect.messages.as_ref().is_some_and(Vec::is_empty) {
            self.error(
                &field("messages"),
                "an empty list of messages checks nothing".to_owned(),
                "list texts that must appear, or say that no rule fires with denies: [] and warns: []",
            );
        }
        for (name, list) in [("denies", &expect.denies), ("warns", &expect.warns)] {
            for (i, rule) in list.iter().flatten().enumerate() {
                let parts: Vec<&str> = rule.split('/').collect();
                if parts.len() != 2 || parts.iter().any(|part| part.is_empty()) {
                    self.error(
                        &format!("{}[{i}]", field(name)),
                        format!("{rule:?} does not name a rule as rule-set/rule"),
                        "write the rule set's metadata.name, a slash and the rule's name",
                    );
                }
            }
        }
        if expect.patched.is_some() && expect.patched_file.is_some() {
            self.error(
                &field("patchedFile"),
                "both patched and patchedFile are given".to_owned(),
                "give one of them",
            );
        }
        if let Some(patched) = expect.patched.take() {
            expect.patched = self.inline(&field("patched"), patched, false);
        } else if let Some(file) = expect.patched_file.take() {
            expect.patched = self.object_file(&field("patchedFile"), &file);
        }
        expect
    }

    /// An inline object, checked for its size and kind.
    fn inline(&mut self, path: &str, value: Value, is_review: bool) -> Option<Value> {
        let bytes = serde_json::to_vec(&value).map_or(0, |encoded| encoded.len() as u64);
        if bytes > MAX_OBJECT_BYTES {
            self.error(
                path,
                format!("the object is {bytes} bytes as JSON, more than the limit of {MAX_OBJECT_BYTES} (3 MiB)"),
                "the API server accepts no larger request; put a smaller object here",
            );
            return None;
        }
        self.kind_fits(path, &value, is_review).then_some(value)
    }

    /// True when `value` is a review exactly when one is expected.
    fn kind_fits(&mut self, path: &str, value: &Value, is_review: bool) -> bool {
        let kind = value.get("kind").and_then(Value::as_str);
        self.kind_is_fitting(path, kind, is_review)
    }

    /// True when an object of `kind` is a review exactly when one is
    /// expected.
    fn kind_is_fitting(&mut self, path: &str, kind: Option<&str>, is_review: bool) -> bool {
        match (is_review, kind == Some("AdmissionReview")) {
            (true, false) => {
                self.error(
                    path,
                    format!(
                        "not an AdmissionReview (kind is {})",
                        kind.map_or("missing".to_owned(), |kind| format!("{kind:?}"))
                    ),
                    "give plain objects with object or objectFile",
                );
                false
            }
            (false, true) => {
                self.error(
                    path,
                    "an AdmissionReview where an object belongs".to_owned(),
                    "give reviews with review or reviewFile",
                );
                false
            }
            _ => true,
        }
    }

    /// The file `name` (relative to the suite), read once per suite under
    /// the size, depth and alias bounds: its resolved path, when it holds
    /// an object that is a review exactly when `is_review` says so.
    fn stored(&mut self, path: &str, name: &str, is_review: bool) -> Option<PathBuf> {
        if self.held_bytes > MAX_SUITE_OBJECT_BYTES {
            return None; // already reported: no further file is read
        }
        let resolved = self.contained(path, name)?;
        if !self.objects.contains_key(&resolved) {
            let value = self.read_object(path, name, &resolved);
            let stored = value.map(|value| Stored { value, sent: None });
            self.objects.insert(resolved.clone(), stored);
        }
        let stored = self.objects.get(&resolved)?.as_ref()?;
        let kind = stored
            .value
            .get("kind")
            .and_then(Value::as_str)
            .map(str::to_owned);
        self.kind_is_fitting(path, kind.as_deref(), is_review)
            .then_some(resolved)
    }

    /// The object in the file `name`, a copy of its own for the case
    /// (`patchedFile`), counted before it is made.
    fn object_file(&mut self, path: &str, name: &str) -> Option<Value> {
        let resolved = self.stored(path, name, false)?;
        let size = review::parsed_size(&self.objects.get(&resolved)?.as_ref()?.value);
        if !self.hold(path, size) {
            return None;
        }
        Some(self.objects.get(&resolved)?.as_ref()?.value.clone())
    }

    /// The object in the file `name` as the case's request holds it
    /// (`objectFile`, `oldObjectFile`): made once per file, counted once
    /// then, and the case's copy counted again before it is made.
    fn object_file_sent(&mut self, path: &str, name: &str) -> Option<Sent> {
        let resolved = self.stored(path, name, false)?;
        let stored = self.objects.get_mut(&resolved)?.as_mut()?;
        let made = match &stored.sent {
            Some(_) => None,
            None => Some(sent(&stored.value)),
        };
        match made {
            None => {}
            Some(Ok(made)) => {
                let held = made.held;
                stored.sent = Some(made);
                if !self.hold(path, held) {
                    return None;
                }
            }
            Some(Err(error)) => {
                self.error(path, format!("{name}: {error}"), "give a smaller object");
                return None;
            }
        }
        let held = self.objects.get(&resolved)?.as_ref()?.sent.as_ref()?.held;
        if !self.hold(path, held) {
            return None;
        }
        self.objects.get(&resolved)?.as_ref()?.sent.clone()
    }

    /// An inline object as the case's request holds it, checked for its
    /// size and kind, and counted.
    fn inline_sent(&mut self, path: &str, value: Value) -> Option<Sent> {
        let value = self.inline(path, value, false)?;
        match sent(&value) {
            Ok(made) => self.hold(path, made.held).then_some(made),
            Err(error) => {
                self.error(path, error.to_string(), "give a smaller object");
                None
            }
        }
    }

    /// The request of the review in the file `name`.
    fn review_file(&mut self, path: &str, name: &str) -> Option<Request> {
        let resolved = self.stored(path, name, true)?;
        let decoded = decode_review(&self.objects.get(&resolved)?.as_ref()?.value);
        self.review(path, decoded)
    }

    /// `name` joined to the suite's directory, when it names a file inside
    /// that directory's tree: a suite comes from anyone (a pull request),
    /// and what it names may be printed in a failure's diff. An absolute
    /// path, a `..` that climbs out of the directory, or a link whose
    /// target lies outside it is reported at `path`.
    fn contained(&mut self, path: &str, name: &str) -> Option<PathBuf> {
        let hint = "name a file in the suite file's directory or below it; copy a file from \
                    elsewhere next to the suite";
        let mut depth = 0_usize;
        for component in Path::new(name).components() {
            match component {
                Component::Normal(_) => depth += 1,
                Component::CurDir => {}
                Component::ParentDir if depth > 0 => depth -= 1,
                Component::ParentDir => {
                    self.error(
                        path,
                        format!("{name:?} leaves the suite file's directory"),
                        hint,
                    );
                    return None;
                }
                Component::RootDir | Component::Prefix(_) => {
                    self.error(path, format!("{name:?} is an absolute path"), hint);
                    return None;
                }
            }
        }
        let resolved = self.base.join(name);
        // A file that does not exist is reported when it is read.
        if let Ok(real) = resolved.canonicalize()
            && !self.real_base.is_some_and(|base| real.starts_with(base))
        {
            self.error(
                path,
                format!("{name:?} is a link to a file outside the suite file's directory"),
                hint,
            );
            return None;
        }
        Some(resolved)
    }

    /// Counts `bytes` more of objects in memory; past
    /// [`MAX_SUITE_OBJECT_BYTES`], reports it (once, at `path`) and returns
    /// false.
    fn hold(&mut self, path: &str, bytes: usize) -> bool {
        let was_within = self.held_bytes <= MAX_SUITE_OBJECT_BYTES;
        self.held_bytes = self.held_bytes.saturating_add(bytes as u64);
        if self.held_bytes <= MAX_SUITE_OBJECT_BYTES {
            return true;
        }
        if was_within {
            self.error(
                path,
                format!(
                    "the objects the cases name take more than {MAX_SUITE_OBJECT_BYTES} bytes \
                     (512 MiB) in memory, each file counted once read and once for every case \
                     that names it"
                ),
                "split the cases over several suite files, or name smaller objects",
            );
        }
        false
    }

    fn read_object(&mut self, path: &str, name: &str, resolved: &Path) -> Option<Value> {
        let hint = "paths are relative to the suite file";
        let text = match read_bounded(resolved, MAX_OBJECT_BYTES) {
            Ok(Some(text)) => text,
            Ok(None) => {
                self.error(path, format!("{name}: no such file"), hint);
                return None;
            }
            Err(ReadProblem::TooLarge(bytes)) => {
                self.error(
                    path,
                    format!(
                        "{name}: file is {bytes} bytes, more than the limit of {MAX_OBJECT_BYTES} (3 MiB)"
                    ),
                    "the API server accepts no larger request",
                );
                return None;
            }
            Err(ReadProblem::Directory) => {
                self.error(path, format!("{name}: is a directory, not a file"), hint);
                return None;
            }
            Err(ReadProblem::NotUtf8(message) | ReadProblem::Unreadable(message)) => {
                self.error(path, format!("{name}: {message}"), hint);
                return None;
            }
        };
        self.read_bytes = self.read_bytes.saturating_add(text.len() as u64);
        if self.read_bytes > MAX_SUITE_INPUT_BYTES {
            self.error(
                path,
                format!(
                    "the suite's files hold more than {MAX_SUITE_INPUT_BYTES} bytes (64 MiB) in all"
                ),
                "split the cases over several suite files",
            );
            return None;
        }
        let shown = resolved.display().to_string();
        // Before any parser that expands aliases or slows down with depth;
        // the problem is in that file, so it is reported there.
        // JSON (`kubectl get -o json`) has no aliases and serde_json bounds
        // its depth; only YAML goes through the checks before parsing.
        // The copy kept for later cases counts too: JSON at what it may
        // take, before it is parsed.
        if text.trim_start().starts_with(['{', '[']) {
            // One object, as the webhook bounds one review.
            if let Err(error) = check_parsed_text(&text) {
                self.error(path, format!("{name}: {error}"), "give a smaller object");
                return None;
            }
            if !self.hold(path, review::parsed_size_estimate(text.as_bytes())) {
                return None;
            }
            if let Ok(value) = serde_json::from_str::<Value>(&text) {
                return Some(value);
            }
        }
        if let Some(diagnostic) = limits::check_manifest(&shown, &text, limits::MAX_TOTAL_NODES) {
            self.diagnostics.push(diagnostic);
            return None;
        }
        let parsed = serde_yaml::from_str::<Value>(&text);
        match parsed {
            Ok(value) if self.hold(path, review::parsed_size(&value)) => Some(value),
            Ok(_) => None,
            Err(error) => {
                self.diagnostics.push(yaml_error(&shown, &error));
                None
            }
        }
    }

    /// The request of an AdmissionReview as `decoded`, its objects held as
    /// JSON text ([`Sent`]) and counted; or its problem, reported at `path`.
    fn review(
        &mut self,
        path: &str,
        decoded: Result<Request, (String, &'static str)>,
    ) -> Option<Request> {
        let mut request = match decoded {
            Ok(request) => request,
            Err((message, hint)) => {
                self.error(path, message, hint);
                return None;
            }
        };
        let mut held = 0_usize;
        for slot in [&mut request.object, &mut request.old_object] {
            match slot {
                Some(Embedded::Parsed(value)) => match sent(value) {
                    Ok(made) => {
                        held = held.saturating_add(made.held);
                        *slot = Some(made.embedded);
                    }
                    Err(_) => held = held.saturating_add(review::parsed_size(value)),
                },
                Some(Embedded::Raw(raw)) => held = held.saturating_add(raw.get().len()),
                None => {}
            }
        }
        self.hold(path, held).then_some(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loads `cases` as the cases of a suite over no real rules (the rule
    /// path is this directory, which exists), from a temporary file.
    fn load_cases(cases: &str) -> Result<LoadedSuite, String> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.suite.yaml");
        let text =
            format!("apiVersion: kadmit.dev/v1alpha1\nkind: Suite\nrules: [.]\ncases:\n{cases}");
        std::fs::write(&path, text).expect("write");
        load(&path).map_err(|diagnostics| {
            diagnostics
                .to_string()
                .replace(&format!("{}/", dir.path().display()), "")
        })
    }

    #[test]
    fn a_suite_file_that_is_no_mapping_is_described_never_quoted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.suite.yaml");
        std::fs::write(&path, "//registry.npmjs.org/:_authToken=npm_SECRET\n").expect("write");
        let Err(refused) = load(&path) else {
            panic!("a suite of one string was loaded");
        };
        let shown = refused.to_string();
        assert!(
            shown.contains("the document is a string of 43 bytes, not a suite"),
            "{shown}"
        );
        assert!(!shown.contains("npm_SECRET"), "{shown}");
    }

    #[test]
    fn plain_objects_become_requests_with_the_case_fields() {
        let suite = load_cases(
            "  - name: delete\n    operation: DELETE\n    namespace: team-a\n    user: alice\n    groups: [admins]\n    subResource: status\n    object: {apiVersion: v1, kind: Pod, metadata: {name: p}}\n    expect: {allowed: true}\n",
        )
        .expect("loads");
        assert_eq!(suite.name, "t");
        let request = &suite.cases[0].request;
        assert_eq!(request.operation, Operation::Delete);
        assert!(request.object.is_none() && request.old_object.is_some());
        assert_eq!(request.namespace.as_deref(), Some("team-a"));
        assert_eq!(request.user_info.username, "alice");
        assert_eq!(request.user_info.groups, ["admins"]);
        assert_eq!(request.sub_resource.as_deref(), Some("status"));
        assert_eq!((suite.cases[0].line, suite.cases[0].column), (5, 5));
    }

    #[test]
    fn reviews_and_objects_are_not_mixed_up() {
        let review = r#"{apiVersion: admission.k8s.io/v1, kind: AdmissionReview, request: {uid: u, kind: {group: "", version: v1, kind: Pod}, resource: {group: "", version: v1, resource: pods}, operation: CREATE, userInfo: {username: a}, object: {apiVersion: v1, kind: Pod, metadata: {name: p}}}}"#;
        let suite = load_cases(&format!(
            "  - name: review\n    review: {review}\n    expect: {{allowed: true}}\n"
        ))
        .expect("loads");
        assert_eq!(suite.cases[0].request.uid, "u");
        let error = load_cases(&format!(
            "  - name: review-as-object\n    object: {review}\n    operation: UPDATE\n    expect: {{allowed: true}}\n"
        ))
        .expect_err("refused");
        assert!(
            error.starts_with(
                "t.suite.yaml:6:5: cases[0].object: an AdmissionReview where an object belongs"
            ),
            "{error}"
        );
        let error = load_cases(
            "  - name: object-as-review\n    review: {apiVersion: v1, kind: Pod, metadata: {name: p}}\n    namespace: x\n    expect: {allowed: true}\n",
        )
        .expect_err("refused");
        assert!(
            error.contains("cases[0].namespace: namespace is given with a review"),
            "{error}"
        );
        let error = load_cases(
            "  - name: object-as-review\n    review: {apiVersion: v1, kind: Pod, metadata: {name: p}}\n    expect: {allowed: true}\n",
        )
        .expect_err("refused");
        assert!(
            error.contains("cases[0].review: not an AdmissionReview (kind is \"Pod\")"),
            "{error}"
        );
    }

    #[test]
    fn requests_hold_the_objects_text_and_are_built_as_for_the_objects() {
        let objects = [
            serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a", "labels": {"x": "y"}}, "spec": {"n": 1.5}}),
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
            serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r", "namespace": "ignored"}}),
            serde_json::json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"generateName": "w-", "name": 3}}),
            serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": "not a map"}),
            serde_json::json!({"apiVersion": "v1", "metadata": {"name": "p"}}),
            serde_json::json!({"kind": "Pod"}),
            serde_json::json!({"apiVersion": "v1", "kind": "List", "items": []}),
            serde_json::json!([1, 2]),
        ];
        let old =
            serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "old"}});
        let answer = |request: Result<Request, InputError>| {
            request.map_or_else(
                |error| serde_json::json!({ "error": error.to_string() }),
                |request| serde_json::to_value(&request).expect("serializes"),
            )
        };
        for object in &objects {
            for operation in [Operation::Create, Operation::Update, Operation::Delete] {
                let old = (operation == Operation::Update).then(|| old.clone());
                let options = ObjectOptions {
                    operation,
                    old: old.clone(),
                    resource: Some("widgets.example.com".to_owned())
                        .filter(|_| object["kind"] == "Widget"),
                    ..ObjectOptions::default()
                };
                let expected = answer(
                    refuse_list(object).and_then(|()| request_for_object(object.clone(), &options)),
                );
                let sent_old = old.as_ref().map(|old| sent(old).expect("serializes"));
                let made = request_of(sent(object).expect("serializes"), sent_old, &options);
                if let Ok(request) = &made {
                    assert!(matches!(request.old_object, None | Some(Embedded::Raw(_))));
                    assert!(matches!(request.object, None | Some(Embedded::Raw(_))));
                }
                assert_eq!(answer(made), expected, "{object} {operation:?}");
            }
        }
    }

    #[test]
    fn objects_whose_text_reads_back_otherwise_are_held_parsed() {
        let floats = [
            0.1,
            1e300,
            2.225_073_858_507_201e-308,
            0.300_000_000_000_000_04,
        ];
        for float in floats {
            let value = serde_json::json!({"a": [float, {"b": float}]});
            let made = sent(&value).expect("serializes");
            assert_eq!(made.embedded.to_value().expect("reads back"), value);
        }
        let mut deep = serde_json::json!(1);
        for _ in 0..130 {
            deep = serde_json::json!([deep]);
        }
        let made = sent(&deep).expect("serializes");
        assert!(matches!(made.embedded, Embedded::Parsed(_)));
        assert_eq!(made.held, review::parsed_size(&deep));
        let shallow = serde_json::json!({"a": [1, -2, "x", null, true]});
        let made = sent(&shallow).expect("serializes");
        let text = shallow.to_string();
        assert!(matches!(&made.embedded, Embedded::Raw(raw) if raw.get() == text));
        assert_eq!(made.held, text.len());
    }

    #[test]
    fn suite_names_come_from_the_file_name() {
        assert_eq!(suite_name(Path::new("a/images.suite.yaml")), "images");
        assert_eq!(suite_name(Path::new("images.suite.yml")), "images");
        assert_eq!(suite_name(Path::new("images.yaml")), "images");
    }
}
