//! Compiled JSONPath expressions, each rooted in one of the documents a rule
//! sees (`object`, `oldObject`, `request`, `podSpec`, `oldPodSpec`, a `forEach`
//! element or a bound outer element).
//!
//! Paths are parsed once by jsonpath-rust (RFC 9535). Paths made only of
//! names, indices, wildcards and unions of those, which is nearly every path in
//! real rules, are then evaluated by a direct walk of the JSON value; filters,
//! slices and descendant segments are evaluated by jsonpath-rust.

use std::fmt;
use std::ops::ControlFlow;
use std::sync::Arc;

use jsonpath_rust::parser::model::{
    Comparable, Filter, FilterAtom, FnArg, JpQuery, Segment, Selector, SingularQuery,
    SingularQuerySegment, Test, TestFunction,
};
use jsonpath_rust::parser::parse_json_path;
use jsonpath_rust::query::js_path_process;
use serde_json::Value;

use super::dotted;
use crate::patch::Token;

/// The document a path starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Root {
    /// `$.object`: the new object (null on DELETE).
    Object,
    /// `$.oldObject`: the existing object (null on CREATE).
    OldObject,
    /// `$.request`: the review's request (operation, userInfo, namespace, ...).
    Request,
    /// `$.podSpec`: the pod spec inside the object, whatever its kind.
    PodSpec,
    /// `$.oldPodSpec`: the pod spec inside the old object.
    OldPodSpec,
    /// `$` inside `forEach`: the current element.
    Element,
    /// `$NAME`: the element bound by an enclosing `forEach` with `as: NAME`;
    /// the number is the depth of that `forEach` (0 = outermost).
    Binding(usize),
}

impl Root {
    /// Whether it names a document of the review rather than a `forEach`
    /// element: what it names is the same wherever a rule reads it.
    pub fn is_document(self) -> bool {
        !matches!(self, Root::Element | Root::Binding(_))
    }

    /// The root a document name (`object`, `podSpec`, ...) names.
    pub(crate) fn from_name(name: &str) -> Option<Root> {
        match name {
            "object" => Some(Root::Object),
            "oldObject" => Some(Root::OldObject),
            "request" => Some(Root::Request),
            "podSpec" => Some(Root::PodSpec),
            "oldPodSpec" => Some(Root::OldPodSpec),
            _ => None,
        }
    }

    /// True for the roots a mutation may write under.
    pub fn is_writable(self) -> bool {
        matches!(self, Root::Object | Root::PodSpec | Root::Element)
    }
}

/// One step of a simple path.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A member name.
    Key(Arc<str>),
    /// A list index; negative counts from the end.
    Index(i64),
    /// Every member or element.
    Wildcard,
    /// Any of these steps.
    Union(Vec<Step>),
}

impl From<&Token> for Step {
    /// The step that goes through a pointer token: its name, or its index.
    fn from(token: &Token) -> Step {
        match token {
            Token::Key(key) => Step::Key(key.clone()),
            Token::Index(index) => Step::Index(i64::try_from(*index).unwrap_or(i64::MAX)),
        }
    }
}

#[derive(Debug, Clone)]
enum Steps {
    /// Names, indices, wildcards: walked directly.
    Simple(Vec<Step>),
    /// Anything else: evaluated by jsonpath-rust.
    Query(JpQuery),
}

/// A compiled path.
#[derive(Debug, Clone)]
pub struct JsonPath {
    text: String,
    root: Root,
    steps: Steps,
    /// Whether it selects at most one value ([`JsonPath::is_singular`]),
    /// known when it compiles: tests ask at every evaluation.
    singular: bool,
}

/// Where a path is being compiled: at document level, or inside `forEach`
/// entries that bound the given names.
#[derive(Debug, Clone, Copy)]
pub struct PathScope<'a> {
    /// True inside a `forEach`, where `$` is the element.
    pub in_for_each: bool,
    /// Names bound with `as`, outermost first (`None` where a level bound none).
    pub bindings: &'a [Option<String>],
}

impl PathScope<'static> {
    /// The document level.
    pub const DOCUMENT: PathScope<'static> = PathScope {
        in_for_each: false,
        bindings: &[],
    };
}

/// A path that does not compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathError {
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub hint: Option<String>,
}

/// The most descendant segments (`..`) a path may have.
pub const MAX_DESCENDANT_SEGMENTS: usize = 1;

/// The most steps a path may take below its document. A review nests at
/// most 128 levels (serde_json's limit, and the direct reader's 100 below
/// it), with the object already two levels down, so a longer path can never
/// select anything; refusing it also keeps what a compile builds for each
/// step (the locations the mutation conflicts compare, the field checks'
/// walks) small: 20,000 steps took 3 GB and 30 s to check.
pub const MAX_PATH_STEPS: usize = 128;

/// Bytes of result paths that count as one budget step in
/// [`JsonPath::query_cost`].
pub const QUERY_PATH_BYTES_PER_STEP: u64 = 8;

const ROOTS_HINT: &str =
    "start paths with $.object, $.oldObject, $.request, $.podSpec or $.oldPodSpec";

impl JsonPath {
    /// Compiles `text` in `scope`.
    pub fn compile(text: &str, scope: PathScope<'_>) -> Result<JsonPath, PathError> {
        let trimmed = text.trim();
        let error = |message: String, hint: Option<&str>| PathError {
            message,
            hint: hint.map(str::to_owned),
        };
        if !trimmed.starts_with('$') {
            return Err(error(
                format!("path {trimmed:?} does not start with $"),
                Some(ROOTS_HINT),
            ));
        }
        let after_dollar = &trimmed[1..];
        let name_len = after_dollar
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
            .count();
        let (root, query_text): (Option<Root>, String) =
            if let Some(rest) = after_dollar.strip_prefix('$') {
                (None, format!("${rest}"))
            } else if name_len > 0 {
                let name = &after_dollar[..name_len];
                let depth = scope
                    .bindings
                    .iter()
                    .position(|bound| bound.as_deref() == Some(name));
                match depth {
                    Some(depth) => (
                        Some(Root::Binding(depth)),
                        format!("${}", &after_dollar[name_len..]),
                    ),
                    None => {
                        return Err(error(
                            format!("${name} is not bound by an enclosing forEach"),
                            Some("bind an element with `as: NAME` on an outer forEach"),
                        ));
                    }
                }
            } else if scope.in_for_each {
                (Some(Root::Element), trimmed.to_owned())
            } else {
                (None, trimmed.to_owned())
            };

        let query = parse_json_path(&query_text).map_err(|e| {
            match dotted::bracket_form(trimmed) {
                Some((name, fixed)) => PathError {
                    message: format!(
                        "invalid JSONPath {trimmed:?}: the name {name:?} cannot follow a dot"
                    ),
                    hint: Some(format!(
                        "a name with characters other than letters, digits and _ is written in brackets: {fixed}"
                    )),
                },
                None => error(
                    format!("invalid JSONPath {trimmed:?}: {}", one_line(&e.to_string())),
                    Some("paths follow RFC 9535, e.g. $.object.spec.containers[*].image"),
                ),
            }
        })?;
        if let Some((name, fixed)) = dotted::blank_in_name(trimmed) {
            return Err(PathError {
                message: format!(
                    "invalid JSONPath {trimmed:?}: the name {name:?} after a dot has blank space in it"
                ),
                hint: Some(format!(
                    "RFC 9535 allows blank space only between steps; a name with spaces is written in brackets: {fixed}"
                )),
            });
        }
        if let Some(fixed) = dotted::past_string_value(trimmed) {
            // Each dot is a step; a label's value is a string, so the steps
            // after its key select nothing, ever.
            return Err(PathError {
                message: format!(
                    "path {trimmed:?} steps past the value of a label or annotation, so it never selects anything"
                ),
                hint: Some(format!("a key with dots is written in brackets: {fixed}")),
            });
        }
        let mut segments = query.segments;
        let root = match root {
            Some(root) => root,
            None => {
                let first = if segments.is_empty() {
                    None
                } else {
                    Some(segments.remove(0))
                };
                match first {
                    Some(Segment::Selector(Selector::Name(name))) => match Root::from_name(&name) {
                        Some(root) => root,
                        None => {
                            return Err(error(
                                format!("path {trimmed:?} starts with unknown document {name:?}"),
                                Some(ROOTS_HINT),
                            ));
                        }
                    },
                    _ => {
                        return Err(error(
                            format!("path {trimmed:?} does not name a document"),
                            Some(ROOTS_HINT),
                        ));
                    }
                }
            }
        };
        if segments.len() > MAX_PATH_STEPS {
            return Err(error(
                format!(
                    "path {} takes {} steps below its document, more than the {MAX_PATH_STEPS} \
                     levels a review can nest, so it never selects anything",
                    crate::excerpt::shown_within(format_args!("{trimmed:?}"), 200),
                    segments.len()
                ),
                Some("a path names one step per level of the object"),
            ));
        }
        let steps = match simple_steps(&segments) {
            Some(steps) => Steps::Simple(steps),
            None => Steps::Query(JpQuery::new(segments)),
        };
        let path = JsonPath {
            text: trimmed.to_owned(),
            root,
            singular: selects_one(&steps),
            steps,
        };
        if path.descendant_segments() > MAX_DESCENDANT_SEGMENTS {
            // Each `..` multiplies the results by the size of the object:
            // `$..*..*` on an ordinary object already selects millions.
            return Err(error(
                format!("path {trimmed:?} has more than one descendant segment (..)"),
                Some("use one .. and name the steps after it, e.g. $.object..containers[*].image"),
            ));
        }
        if let Steps::Query(query) = &path.steps
            && let Some(refused) = super::filters::refused(&query.segments)
        {
            let (message, hint) = refused.explain(trimmed);
            return Err(error(message, Some(hint)));
        }
        Ok(path)
    }

    /// The path as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The steps below the root, when the path has only names, indices,
    /// wildcards and unions of those (`None` for filters, slices and
    /// descendant segments).
    pub fn simple_steps(&self) -> Option<&[Step]> {
        match &self.steps {
            Steps::Simple(steps) => Some(steps),
            Steps::Query(_) => None,
        }
    }

    /// The document it starts from.
    pub fn root(&self) -> Root {
        self.root
    }

    /// Its leading name, index, wildcard and union steps (every step of a
    /// path walked directly), and whether they are the whole path: what
    /// [`super::fields`] can check against a kind's fields.
    pub(crate) fn leading_steps(&self) -> (std::borrow::Cow<'_, [Step]>, bool) {
        match &self.steps {
            Steps::Simple(steps) => (std::borrow::Cow::Borrowed(steps.as_slice()), true),
            Steps::Query(query) => {
                let steps = query
                    .segments
                    .iter()
                    .map_while(|segment| {
                        simple_steps(std::slice::from_ref(segment)).and_then(|mut one| one.pop())
                    })
                    .collect();
                (std::borrow::Cow::Owned(steps), false)
            }
        }
    }

    /// The member names its first step can select from the root, `None` when
    /// that step can select any member (a wildcard, an index, a query).
    pub fn first_keys(&self) -> Option<Vec<&str>> {
        let Steps::Simple(steps) = &self.steps else {
            return None;
        };
        match steps.first() {
            // The root itself: every member.
            None => None,
            Some(Step::Key(key)) => Some(vec![&**key]),
            Some(Step::Union(union)) => union
                .iter()
                .map(|step| match step {
                    Step::Key(key) => Some(&**key),
                    _ => None,
                })
                .collect(),
            Some(Step::Index(_) | Step::Wildcard) => None,
        }
    }

    /// The queries from `$` inside its filters, each as its name and index
    /// steps. Inside a filter, `$` is the document the path starts from
    /// (the object, the element), not the review.
    pub(crate) fn filter_root_queries(&self) -> Vec<Vec<Step>> {
        let mut out = Vec::new();
        if let Steps::Query(query) = &self.steps {
            root_queries_in_segments(&query.segments, &mut out);
        }
        out
    }

    /// True when the path selects at most one value wherever it is used.
    pub fn is_singular(&self) -> bool {
        self.singular
    }

    /// Appends every value the path selects from `root` to `out`.
    pub fn select<'a>(&self, root: &'a Value, out: &mut Vec<&'a Value>) {
        match &self.steps {
            Steps::Simple(steps) => select_steps(steps, root, out),
            Steps::Query(query) => {
                if let Ok(found) = js_path_process(query, root) {
                    out.extend(found.into_iter().map(|r| r.val));
                }
            }
        }
    }

    /// What evaluating the path on `root` may cost, in budget steps, counted
    /// up to just past `limit`: 0 for a path walked directly (charged by
    /// what it selects), and for a query that jsonpath-rust evaluates, one
    /// step per value under `root` and one per
    /// [`QUERY_PATH_BYTES_PER_STEP`] bytes of that value's path from `root`.
    ///
    /// jsonpath-rust builds the whole path text of every value it visits,
    /// and a descendant segment visits every value. Under a long key those
    /// texts are long: `$..x` on `{"<1 MiB key>": [0, 0, …]}` (a few MiB of
    /// body) would build a MiB for each element, hundreds of GiB in all,
    /// before it returned anything that could be charged. The walk that
    /// counts is cheap and stops as soon as `limit` is passed.
    #[inline]
    pub fn query_cost(&self, root: &Value, limit: u64) -> u64 {
        match self.steps {
            Steps::Simple(_) => 0,
            Steps::Query(_) => query_walk_cost(root, limit),
        }
    }
}

/// [`JsonPath::query_cost`] of a query: kept out of line, so that the
/// check costs a path walked directly only a comparison.
fn query_walk_cost(root: &Value, limit: u64) -> u64 {
    // `$`, then `['key']` or `[index]` per step, as jsonpath-rust
    // writes them.
    let mut stack: Vec<(&Value, u64)> = vec![(root, 1)];
    let mut cost = 0_u64;
    while let Some((value, path_bytes)) = stack.pop() {
        cost = cost.saturating_add(1 + path_bytes / QUERY_PATH_BYTES_PER_STEP);
        if cost > limit {
            return cost;
        }
        match value {
            Value::Object(map) => stack.extend(map.iter().map(|(key, child)| {
                let key_bytes = u64::try_from(key.len()).unwrap_or(u64::MAX);
                (
                    child,
                    path_bytes.saturating_add(key_bytes.saturating_add(4)),
                )
            })),
            Value::Array(items) => {
                let index_bytes =
                    u64::try_from(items.len().to_string().len() + 2).unwrap_or(u64::MAX);
                stack.extend(
                    items
                        .iter()
                        .map(|child| (child, path_bytes.saturating_add(index_bytes))),
                );
            }
            _ => {}
        }
    }
    cost
}

impl JsonPath {
    /// The first value the path selects.
    pub fn first<'a>(&self, root: &'a Value) -> Option<&'a Value> {
        match &self.steps {
            // Walked without collecting: most copies and operands are one
            // value at a plain path.
            Steps::Simple(steps) => first_of_steps(steps, root),
            Steps::Query(_) => {
                let mut out = Vec::new();
                self.select(root, &mut out);
                out.first().copied()
            }
        }
    }

    /// Splits the path for writing: the part up to and including its last
    /// non-simple step (whose matches must exist), and the trailing names and
    /// indices (created when missing).
    pub fn split_for_write(&self) -> (JsonPath, Vec<Token>) {
        let (steps, tail) = match &self.steps {
            Steps::Simple(steps) => {
                let cut = steps
                    .iter()
                    .rposition(|step| match step {
                        Step::Key(_) => false,
                        Step::Index(i) => *i < 0,
                        _ => true,
                    })
                    .map(|i| i + 1)
                    .unwrap_or(0);
                let tail = steps[cut..]
                    .iter()
                    .filter_map(|step| match step {
                        Step::Key(key) => Some(Token::Key(key.clone())),
                        Step::Index(i) => usize::try_from(*i).ok().map(Token::Index),
                        _ => None,
                    })
                    .collect();
                (Steps::Simple(steps[..cut].to_vec()), tail)
            }
            Steps::Query(query) => {
                let segments = &query.segments;
                let cut = segments
                    .iter()
                    .rposition(|segment| tail_token(segment).is_none())
                    .map_or(0, |i| i + 1);
                let tail = segments[cut..].iter().filter_map(tail_token).collect();
                let leading = &segments[..cut];
                let steps = match simple_steps(leading) {
                    Some(steps) => Steps::Simple(steps),
                    None => Steps::Query(JpQuery::new(leading.to_vec())),
                };
                (steps, tail)
            }
        };
        let prefix = JsonPath {
            text: self.text.clone(),
            root: self.root,
            singular: selects_one(&steps),
            steps,
        };
        (prefix, tail)
    }

    /// Appends the location (pointer tokens from `root`, after `base`) of every
    /// value the path selects, each followed by `tail` (a write path's
    /// trailing keys, so that every location is allocated once, whole).
    pub fn locate(&self, root: &Value, base: &[Token], tail: &[Token], out: &mut Vec<Vec<Token>>) {
        match &self.steps {
            Steps::Simple(steps) => {
                // Room for a token per step, so the walk does not reallocate.
                let mut prefix = Vec::with_capacity(base.len() + steps.len());
                prefix.extend_from_slice(base);
                locate_steps(steps, root, &mut prefix, tail, out);
            }
            Steps::Query(query) => {
                if let Ok(found) = js_path_process(query, root) {
                    for item in found {
                        if let Some(tokens) = parse_normalized(&item.path) {
                            out.push([base, &tokens, tail].concat());
                        }
                    }
                }
            }
        }
    }
}

/// What a read through a path depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReadKind {
    /// Only which nodes exist along the path: the elements a `forEach`
    /// visits, the parents a write goes under. Contents below the selected
    /// nodes do not matter.
    Shape,
    /// Everything at and below the selected values: a condition's subject, a
    /// copied value.
    Value,
}

impl JsonPath {
    /// Whether adding a value at `write` (the location below this path's
    /// root) can change what reading the path gives. Conservative: any index
    /// for a negative index, anything for a path jsonpath-rust evaluates.
    pub fn is_affected_by(&self, write: &[Token], kind: ReadKind) -> bool {
        let Steps::Simple(steps) = &self.steps else {
            return true;
        };
        for (depth, token) in write.iter().enumerate() {
            let Some(step) = steps.get(depth) else {
                // The write is below a selected node.
                return kind == ReadKind::Value;
            };
            if !step_admits(step, token) {
                return false;
            }
        }
        // The write is at or above a node the path goes through.
        true
    }
}

/// Whether `step` can go through `token`. A key never names a list element
/// nor an index a map entry: the node there is one or the other.
fn step_admits(step: &Step, token: &Token) -> bool {
    match (step, token) {
        (Step::Key(key), Token::Key(token)) => key == token,
        (Step::Index(index), Token::Index(token)) if *index >= 0 => {
            usize::try_from(*index).ok() == Some(*token)
        }
        // Which element a negative index names depends on the list's length.
        (Step::Index(index), Token::Index(_)) => *index < 0,
        (Step::Wildcard, _) => true,
        (Step::Union(options), token) => options.iter().any(|option| step_admits(option, token)),
        (Step::Key(_), Token::Index(_)) | (Step::Index(_), Token::Key(_)) => false,
    }
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Collects the root queries inside the filters of `segments`
/// ([`JsonPath::filter_root_queries`]).
fn root_queries_in_segments(segments: &[Segment], out: &mut Vec<Vec<Step>>) {
    for segment in segments {
        let selectors = match segment {
            Segment::Descendant(inner) => {
                root_queries_in_segments(std::slice::from_ref(&**inner), out);
                continue;
            }
            Segment::Selector(selector) => std::slice::from_ref(selector),
            Segment::Selectors(selectors) => selectors.as_slice(),
        };
        for selector in selectors {
            if let Selector::Filter(filter) = selector {
                root_queries_in_filter(filter, out);
            }
        }
    }
}

fn root_queries_in_filter(filter: &Filter, out: &mut Vec<Vec<Step>>) {
    match filter {
        Filter::Or(filters) | Filter::And(filters) => {
            filters.iter().for_each(|f| root_queries_in_filter(f, out));
        }
        Filter::Atom(FilterAtom::Filter { expr, .. }) => root_queries_in_filter(expr, out),
        Filter::Atom(FilterAtom::Test { expr, .. }) => root_queries_in_test(expr, out),
        Filter::Atom(FilterAtom::Comparison(comparison)) => {
            let (left, right) = super::filters::operands(comparison);
            for comparable in [left, right] {
                match comparable {
                    Comparable::SingularQuery(SingularQuery::Root(segments)) => out.push(
                        segments
                            .iter()
                            .map(|segment| match segment {
                                SingularQuerySegment::Name(name) => Step::Key(Arc::from(&**name)),
                                SingularQuerySegment::Index(index) => Step::Index(*index),
                            })
                            .collect(),
                    ),
                    Comparable::Function(function) => root_queries_in_function(function, out),
                    Comparable::SingularQuery(SingularQuery::Current(_))
                    | Comparable::Literal(_) => {}
                }
            }
        }
    }
}

fn root_queries_in_test(test: &Test, out: &mut Vec<Vec<Step>>) {
    match test {
        Test::RelQuery(segments) => root_queries_in_segments(segments, out),
        Test::AbsQuery(query) => {
            out.push(
                query
                    .segments
                    .iter()
                    .map_while(|segment| {
                        simple_steps(std::slice::from_ref(segment)).and_then(|mut one| one.pop())
                    })
                    .collect(),
            );
            root_queries_in_segments(&query.segments, out);
        }
        Test::Function(function) => root_queries_in_function(function, out),
    }
}

fn root_queries_in_function(function: &TestFunction, out: &mut Vec<Vec<Step>>) {
    let mut argument = |argument: &FnArg| match argument {
        FnArg::Literal(_) => {}
        FnArg::Test(test) => root_queries_in_test(test, out),
        FnArg::Filter(filter) => root_queries_in_filter(filter, out),
    };
    match function {
        TestFunction::Length(one) => argument(one),
        TestFunction::Value(one) | TestFunction::Count(one) => argument(one),
        TestFunction::Search(a, b) | TestFunction::Match(a, b) => {
            argument(a);
            argument(b);
        }
        TestFunction::Custom(_, arguments) => arguments.iter().for_each(argument),
    }
}

/// The token a segment of a write path's tail names: one name, or one
/// index that is not negative (created when missing); `None` for any
/// other segment, whose matches must exist.
fn tail_token(segment: &Segment) -> Option<Token> {
    let selector = match segment {
        Segment::Selector(selector) => selector,
        Segment::Selectors(selectors) if selectors.len() == 1 => selectors.first()?,
        _ => return None,
    };
    match selector {
        Selector::Name(name) => Some(Token::Key(Arc::from(name.as_str()))),
        Selector::Index(index) => usize::try_from(*index).ok().map(Token::Index),
        _ => None,
    }
}

fn simple_selector(selector: &Selector) -> Option<Step> {
    match selector {
        Selector::Name(name) => Some(Step::Key(Arc::from(name.as_str()))),
        Selector::Index(index) => Some(Step::Index(*index)),
        Selector::Wildcard => Some(Step::Wildcard),
        _ => None,
    }
}

fn simple_steps(segments: &[Segment]) -> Option<Vec<Step>> {
    segments
        .iter()
        .map(|segment| match segment {
            Segment::Selector(selector) => simple_selector(selector),
            Segment::Selectors(selectors) => {
                let steps: Option<Vec<Step>> = selectors.iter().map(simple_selector).collect();
                let steps = steps?;
                if steps.len() == 1 {
                    steps.into_iter().next()
                } else {
                    Some(Step::Union(steps))
                }
            }
            Segment::Descendant(_) => None,
        })
        .collect()
}

fn resolve_index(index: i64, len: usize) -> Option<usize> {
    if index >= 0 {
        let index = usize::try_from(index).ok()?;
        (index < len).then_some(index)
    } else {
        let back = usize::try_from(index.unsigned_abs()).ok()?;
        len.checked_sub(back)
    }
}

/// Whether `steps` select at most one value: names and indices only.
fn selects_one(steps: &Steps) -> bool {
    match steps {
        Steps::Simple(steps) => steps
            .iter()
            .all(|step| matches!(step, Step::Key(_) | Step::Index(_))),
        Steps::Query(_) => false,
    }
}

fn select_steps<'a>(steps: &[Step], value: &'a Value, out: &mut Vec<&'a Value>) {
    let Some((step, rest)) = steps.split_first() else {
        out.push(value);
        return;
    };
    let _ = each_child::<()>(step, value, &mut |child| {
        select_steps(rest, child, out);
        ControlFlow::Continue(())
    });
}

/// The first value `select_steps` would give, without collecting the rest.
fn first_of_steps<'a>(steps: &[Step], value: &'a Value) -> Option<&'a Value> {
    let Some((step, rest)) = steps.split_first() else {
        return Some(value);
    };
    match each_child(
        step,
        value,
        &mut |child| match first_of_steps(rest, child) {
            Some(found) => ControlFlow::Break(found),
            None => ControlFlow::Continue(()),
        },
    ) {
        ControlFlow::Break(found) => Some(found),
        ControlFlow::Continue(()) => None,
    }
}

/// Hands `visit` each value one step selects from `value`, in order, until
/// it breaks. A union's options are visited in turn, without collecting
/// what each selects first (a `forEach` over
/// `['containers','initContainers','ephemeralContainers']` runs per rule).
fn each_child<'a, B>(
    step: &Step,
    value: &'a Value,
    visit: &mut impl FnMut(&'a Value) -> ControlFlow<B>,
) -> ControlFlow<B> {
    match step {
        Step::Key(key) => match value.as_object().and_then(|map| map.get(&**key)) {
            Some(child) => visit(child),
            None => ControlFlow::Continue(()),
        },
        Step::Index(index) => match value
            .as_array()
            .and_then(|list| resolve_index(*index, list.len()).and_then(|i| list.get(i)))
        {
            Some(child) => visit(child),
            None => ControlFlow::Continue(()),
        },
        Step::Wildcard => match value {
            Value::Array(list) => list.iter().try_for_each(visit),
            Value::Object(map) => map.values().try_for_each(visit),
            _ => ControlFlow::Continue(()),
        },
        Step::Union(options) => options
            .iter()
            .try_for_each(|option| each_child(option, value, visit)),
    }
}

fn locate_steps(
    steps: &[Step],
    value: &Value,
    prefix: &mut Vec<Token>,
    tail: &[Token],
    out: &mut Vec<Vec<Token>>,
) {
    let Some((step, rest)) = steps.split_first() else {
        out.push([prefix.as_slice(), tail].concat());
        return;
    };
    each_located_child(step, value, &mut |token, child| {
        prefix.push(token);
        locate_steps(rest, child, prefix, tail, out);
        prefix.pop();
    });
}

/// [`each_child`] with the token that leads to each child: a union's
/// options are visited in turn, each going one level down, so what a
/// `forEach` over `['containers','initContainers']` locates costs no
/// list of its own.
fn each_located_child<'a>(step: &Step, value: &'a Value, visit: &mut impl FnMut(Token, &'a Value)) {
    match step {
        Step::Key(key) => {
            if let Some(child) = value.as_object().and_then(|map| map.get(&**key)) {
                visit(Token::Key(key.clone()), child);
            }
        }
        Step::Index(index) => {
            if let Some(list) = value.as_array()
                && let Some(i) = resolve_index(*index, list.len())
                && let Some(child) = list.get(i)
            {
                visit(Token::Index(i), child);
            }
        }
        Step::Wildcard => match value {
            Value::Array(list) => {
                for (i, child) in list.iter().enumerate() {
                    visit(Token::Index(i), child);
                }
            }
            Value::Object(map) => {
                for (key, child) in map {
                    visit(Token::Key(Arc::from(key.as_str())), child);
                }
            }
            _ => {}
        },
        Step::Union(options) => {
            for option in options {
                each_located_child(option, value, visit);
            }
        }
    }
}

/// Parses an RFC 9535 normalized path (`$['spec']['containers'][0]`) into
/// pointer tokens.
fn parse_normalized(path: &str) -> Option<Vec<Token>> {
    let mut tokens = Vec::new();
    let mut chars = path.strip_prefix('$')?.chars().peekable();
    while let Some(open) = chars.next() {
        if open != '[' {
            return None;
        }
        if chars.peek() == Some(&'\'') {
            chars.next();
            let mut name = String::new();
            loop {
                match chars.next()? {
                    '\'' => break,
                    '\\' => match chars.next()? {
                        'b' => name.push('\u{0008}'),
                        'f' => name.push('\u{000C}'),
                        'n' => name.push('\n'),
                        'r' => name.push('\r'),
                        't' => name.push('\t'),
                        'u' => {
                            let hex: String = (0..4).filter_map(|_| chars.next()).collect();
                            name.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                        }
                        other => name.push(other),
                    },
                    other => name.push(other),
                }
            }
            tokens.push(Token::Key(Arc::from(name)));
            if chars.next()? != ']' {
                return None;
            }
        } else {
            let mut digits = String::new();
            loop {
                match chars.next()? {
                    ']' => break,
                    digit => digits.push(digit),
                }
            }
            tokens.push(Token::Index(digits.parse().ok()?));
        }
    }
    Some(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_costs_its_values_and_their_path_bytes_and_the_count_stops_past_the_limit() {
        let simple = JsonPath::compile("$.object.spec.containers[*].image", PathScope::DOCUMENT)
            .expect("compiles");
        let query = JsonPath::compile("$.object..image", PathScope::DOCUMENT).expect("compiles");
        let pod = serde_json::json!({"spec": {"containers": [{"image": "a"}, {"image": "b"}]}});
        assert_eq!(simple.query_cost(&pod, u64::MAX), 0);
        // Seven values, whose paths from the root take 1 (`$`), 9
        // (`$['spec']`), 23, 26, 26, 35 and 35 bytes: one step each, and
        // 0 + 1 + 2 + 3 + 3 + 4 + 4 for their paths.
        assert_eq!(query.query_cost(&pod, u64::MAX), 7 + 17);
        // `$` costs 1, `spec` 2: the count stops at `containers` (3 more).
        assert_eq!(query.query_cost(&pod, 3), 6, "stops past the limit");

        // 100,000 elements under a 1 MiB key: about 100 GiB of paths.
        let hostile = serde_json::json!({"k".repeat(1 << 20): vec![0; 100_000]});
        let limit = 10_000_000;
        let cost = query.query_cost(&hostile, limit);
        assert!(cost > limit, "{cost}");
        // It stopped at the first value past the limit: one element's path
        // is about 1 MiB, 131,000 steps.
        assert!(
            cost < limit + (2 << 20) / QUERY_PATH_BYTES_PER_STEP,
            "{cost}"
        );
    }
    use serde_json::json;

    fn compile(text: &str) -> JsonPath {
        JsonPath::compile(text, PathScope::DOCUMENT).unwrap_or_else(|e| panic!("{text}: {e:?}"))
    }

    fn pod() -> Value {
        json!({"spec": {"containers": [
            {"name": "a", "image": "nginx", "ports": [{"containerPort": 80}]},
            {"name": "b", "image": "envoy", "securityContext": {"privileged": true}}
        ], "initContainers": [{"name": "init", "image": "busybox"}]}})
    }

    fn selected(text: &str, value: &Value) -> Vec<Value> {
        let path = compile(text);
        let mut out = Vec::new();
        path.select(value, &mut out);
        out.into_iter().cloned().collect()
    }

    #[test]
    fn a_path_deeper_than_any_review_is_refused() {
        let within = format!("$.object{}", ".a".repeat(MAX_PATH_STEPS));
        assert!(JsonPath::compile(&within, PathScope::DOCUMENT).is_ok());
        for deeper in [
            format!("$.object{}", ".a".repeat(MAX_PATH_STEPS + 1)),
            format!("$.object{}", "[*]".repeat(20_000)),
            format!("$.object.a[?@.b]{}", ".c".repeat(MAX_PATH_STEPS)),
        ] {
            let error = JsonPath::compile(&deeper, PathScope::DOCUMENT).expect_err("refused");
            assert!(
                error.message.contains("levels a review can nest"),
                "{}",
                error.message
            );
            assert!(error.message.len() < 400, "{}", error.message.len());
        }
    }

    #[test]
    fn a_name_a_dot_cannot_take_gets_a_hint_that_compiles() {
        for written in [
            "$.object.metadata.labels.app-name",
            "$.object.metadata.labels.app.kubernetes.io/name",
            "$.object.spec.template.metadata.annotations.example.com/x-y",
            "$.object.spec.containers[*].my-field",
            "$.object.metadata.annotations.example.com",
            "$.object.spec.selector.matchLabels.app.kubernetes.io",
        ] {
            let error = JsonPath::compile(written, PathScope::DOCUMENT).unwrap_err();
            let hint = error.hint.unwrap_or_default();
            let fixed = hint.rsplit(": ").next().unwrap_or_default();
            assert!(fixed.contains("['"), "{written}: {hint}");
            let compiled = JsonPath::compile(fixed, PathScope::DOCUMENT);
            assert!(compiled.is_ok(), "{written} -> {fixed}: {compiled:?}");
        }
        let doc = json!({"metadata": {"labels": {"app.kubernetes.io/name": "web"}}});
        assert_eq!(
            selected("$.object.metadata.labels['app.kubernetes.io/name']", &doc),
            vec![json!("web")]
        );
    }

    #[test]
    fn roots() {
        assert_eq!(compile("$.object.spec").root(), Root::Object);
        assert_eq!(compile("$['oldObject'].spec").root(), Root::OldObject);
        assert_eq!(compile("$.podSpec.containers").root(), Root::PodSpec);
        assert_eq!(compile("$$.request.name").root(), Root::Request);
        let scope = PathScope {
            in_for_each: true,
            bindings: &[Some("c".to_owned()), None],
        };
        assert_eq!(
            JsonPath::compile("$.name", scope).unwrap().root(),
            Root::Element
        );
        assert_eq!(
            JsonPath::compile("$c.name", scope).unwrap().root(),
            Root::Binding(0)
        );
        assert_eq!(
            JsonPath::compile("$$.object", scope).unwrap().root(),
            Root::Object
        );
    }

    #[test]
    fn finds_the_queries_from_the_root_inside_filters() {
        let found = |text: &str| -> Vec<String> {
            compile(text)
                .filter_root_queries()
                .iter()
                .map(|steps| super::super::fields::render(steps, None))
                .collect()
        };
        for (text, expected) in [
            ("$.object.spec.containers[*].name", &[][..]),
            ("$.object.spec.containers[?@.name == 'a']", &[][..]),
            (
                "$.object.spec.containers[?@.name == $.object.metadata.name]",
                &["object.metadata.name"][..],
            ),
            (
                "$.object.spec.containers[?$.metadata.labels.a && @.x[0] == $.oldObject[0]]",
                &["metadata.labels.a", "oldObject[0]"][..],
            ),
            (
                "$.object.spec.containers[?length(@.name) > length($.request.name)]",
                &["request.name"][..],
            ),
            (
                "$.object.spec.containers[?@.env[?@.value == $.podSpec.nodeName]]",
                &["podSpec.nodeName"][..],
            ),
            (
                "$.object.spec.containers[?!(@.a == 1 || $.object.b)]",
                &["object.b"][..],
            ),
        ] {
            assert_eq!(found(text), expected, "{text}");
        }
    }

    #[test]
    fn rejects_bad_paths() {
        for bad in ["object.spec", "$.spec", "$", "$[0]", "$.object[", "$x.name"] {
            let err = JsonPath::compile(bad, PathScope::DOCUMENT).unwrap_err();
            assert!(err.hint.is_some(), "{bad}: {err:?}");
        }
    }

    #[test]
    fn simple_and_query_paths_agree() {
        let doc = pod();
        let cases = [
            (
                "$.object.spec.containers[*].image",
                json!(["nginx", "envoy"]),
            ),
            (
                "$.object.spec['containers','initContainers'][*].name",
                json!(["a", "b", "init"]),
            ),
            ("$.object.spec.containers[-1].name", json!(["b"])),
            (
                "$.object.spec.containers[0].ports[*].containerPort",
                json!([80]),
            ),
            ("$.object.spec.missing[*]", json!([])),
            (
                "$.object.spec.containers[1,7,0,-1].name",
                json!(["b", "a", "b"]),
            ),
            (
                "$.object.spec['missing','containers'][7,1].name",
                json!(["b"]),
            ),
        ];
        let wrapped = json!({"object": doc});
        for (text, expected) in cases {
            let path = compile(text);
            let mut simple = Vec::new();
            path.select(&wrapped["object"], &mut simple);
            assert_eq!(
                path.first(&wrapped["object"]),
                simple.first().copied(),
                "{text}"
            );
            let simple: Vec<Value> = simple.into_iter().cloned().collect();
            assert_eq!(Value::Array(simple.clone()), expected, "{text}");
            // The same query through jsonpath-rust over the wrapped document.
            let query = parse_json_path(text).unwrap();
            let reference: Vec<Value> = js_path_process(&query, &wrapped)
                .unwrap()
                .into_iter()
                .map(|r| r.val.clone())
                .collect();
            assert_eq!(simple, reference, "{text}");
        }

        // A union after a step that selected several values: RFC 9535 order,
        // each value in turn with the union's options in order (jsonpath-rust
        // goes option by option across all the values instead).
        for (text, expected) in [
            (
                "$.object.spec['initContainers','missing','containers'][1,0,-1].name",
                json!(["init", "init", "b", "a", "b"]),
            ),
            (
                "$.object.spec['containers','initContainers'][*]['name','image']",
                json!(["a", "nginx", "b", "envoy", "init", "busybox"]),
            ),
        ] {
            let path = compile(text);
            assert!(path.simple_steps().is_some(), "{text}");
            let mut simple = Vec::new();
            path.select(&doc, &mut simple);
            assert_eq!(path.first(&doc), simple.first().copied(), "{text}");
            let simple: Vec<Value> = simple.into_iter().cloned().collect();
            assert_eq!(Value::Array(simple), expected, "{text}");
        }
    }

    #[test]
    fn a_path_knows_when_it_names_one_place() {
        for (text, singular) in [
            ("$.object.spec.containers[0].name", true),
            ("$.object.metadata.labels['app']", true),
            ("$.object.spec.containers[*].name", false),
            ("$.object.spec['a','b']", false),
            ("$.object..name", false),
        ] {
            assert_eq!(compile(text).is_singular(), singular, "{text}");
        }
        // The part of a wildcard path up to the place a write creates.
        let (prefix, tail) = compile("$.object.spec.containers[*].a.b").split_for_write();
        assert!(!prefix.is_singular() && !tail.is_empty());
        let (prefix, _) = compile("$.object.spec.a.b").split_for_write();
        assert!(prefix.is_singular());
    }

    #[test]
    fn filters_and_descendants_use_jsonpath_rust() {
        let doc = pod();
        assert_eq!(
            selected(
                "$.object.spec.containers[?@.securityContext.privileged == true].name",
                &doc
            ),
            vec![json!("b")]
        );
        assert_eq!(selected("$.object..image", &doc).len(), 3);
    }

    #[test]
    fn writes_affect_reads_along_and_below_the_path() {
        let tokens = |text: &str| -> Vec<Token> {
            text.split('/')
                .filter(|t| !t.is_empty())
                .map(|t| match t.parse::<usize>() {
                    Ok(index) => Token::Index(index),
                    Err(_) => Token::Key(Arc::from(t)),
                })
                .collect()
        };
        let path = |text: &str| JsonPath::compile(text, PathScope::DOCUMENT).unwrap();
        let containers = path("$.object.spec['containers','initContainers'][*]");
        let image = path("$.object.spec.containers[0].image");
        let filtered = path("$.object.spec.containers[?@.name == 'a']");
        let last = path("$.object.spec.containers[-1].image");
        let cases = [
            // A new element, a created list, a replaced parent: the shape changes.
            (&containers, "/spec/containers/1", ReadKind::Shape, true),
            (&containers, "/spec/initContainers", ReadKind::Shape, true),
            (&containers, "/spec", ReadKind::Shape, true),
            // Inside an element: the shape does not change, the value does.
            (
                &containers,
                "/spec/containers/0/image",
                ReadKind::Shape,
                false,
            ),
            (
                &containers,
                "/spec/containers/0/image",
                ReadKind::Value,
                true,
            ),
            // Elsewhere.
            (&containers, "/spec/volumes/0", ReadKind::Value, false),
            (&containers, "/metadata/labels", ReadKind::Value, false),
            (&image, "/spec/containers/1/image", ReadKind::Value, false),
            (&image, "/spec/containers/0/image", ReadKind::Value, true),
            (&image, "/spec/containers/0/name", ReadKind::Value, false),
            // Which element -1 is depends on the list; a filter reads inside.
            (&last, "/spec/containers/7/image", ReadKind::Value, true),
            (&filtered, "/metadata/name", ReadKind::Shape, true),
        ];
        for (path, write, kind, expected) in cases {
            assert_eq!(
                path.is_affected_by(&tokens(write), kind),
                expected,
                "{path} {kind:?} after a write at {write}"
            );
        }
    }

    #[test]
    fn a_union_locates_what_it_selects_in_the_same_order() {
        let doc = pod();
        for text in [
            "$.object.spec['containers','initContainers'][*]",
            "$.object.spec['initContainers','containers'][*].name",
            "$.object.spec.containers[1,0,-1,5]",
            "$.object.spec['containers','missing',*][*]",
            "$.object.spec[*][-1]['name','image','nothing']",
        ] {
            let path = compile(text);
            let mut located = Vec::new();
            path.locate(&doc, &[], &[], &mut located);
            let resolved: Vec<Value> = located
                .iter()
                .map(|tokens| crate::patch::resolve(&doc, tokens).cloned().expect(text))
                .collect();
            assert_eq!(resolved, selected(text, &doc), "{text}");
            assert!(!located.is_empty(), "{text}");
        }
    }

    #[test]
    fn locates_for_writes() {
        let doc = pod();
        let (prefix, tail) =
            compile("$.object.spec.containers[*].securityContext.runAsNonRoot").split_for_write();
        assert_eq!(
            tail,
            vec![
                Token::Key("securityContext".into()),
                Token::Key("runAsNonRoot".into())
            ]
        );
        let mut out = Vec::new();
        prefix.locate(&doc, &[], &[], &mut out);
        assert_eq!(
            out,
            vec![
                vec![
                    Token::Key("spec".into()),
                    Token::Key("containers".into()),
                    Token::Index(0)
                ],
                vec![
                    Token::Key("spec".into()),
                    Token::Key("containers".into()),
                    Token::Index(1)
                ],
            ]
        );
        let filtered = compile("$.object.spec.containers[?@.name == 'b'].image");
        let mut out = Vec::new();
        filtered.locate(&doc, &[], &[], &mut out);
        assert_eq!(
            out,
            vec![vec![
                Token::Key("spec".into()),
                Token::Key("containers".into()),
                Token::Index(1),
                Token::Key("image".into())
            ]]
        );
    }

    #[test]
    fn normalized_paths_with_escapes() {
        assert_eq!(
            parse_normalized(r"$['a\'b']['c\\d'][3]"),
            Some(vec![
                Token::Key("a'b".into()),
                Token::Key(r"c\d".into()),
                Token::Index(3)
            ])
        );
    }
}

/// Where in the object a path can point: the steps from the object's root,
/// one sequence for each place its root can be (a pod spec sits at three
/// places, depending on the kind). Used at compile time to find a write
/// whose copied value can contain the written location.
#[derive(Debug, Clone)]
pub enum Reach {
    /// Not in the object (`oldObject`, `request`, a bound name) or nothing.
    Nowhere,
    /// Somewhere in the object, but where cannot be told from the path
    /// (filters, slices, descendant segments).
    Unknown,
    /// One of these step sequences from the object's root.
    At(Vec<Vec<Step>>),
}

impl Reach {
    /// The reach of the object's root itself.
    pub fn object() -> Reach {
        Reach::At(vec![Vec::new()])
    }

    /// The same reach followed by the names and indices of `tail`.
    pub fn extended(&self, tail: &[Token]) -> Reach {
        match self {
            Reach::At(alternatives) => Reach::At(
                alternatives
                    .iter()
                    .map(|steps| {
                        let mut steps = steps.clone();
                        steps.extend(tail.iter().map(Step::from));
                        steps
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// Whether a value read here can hold (be at or above) a location in
    /// `target`. Where either side is [`Reach::Unknown`] this cannot be
    /// told, and the answer is no: the size bound on what mutations add
    /// (see `eval::Budget`) still stops such a copy at run time.
    pub fn may_contain(&self, target: &Reach) -> bool {
        let (Reach::At(sources), Reach::At(targets)) = (self, target) else {
            return false;
        };
        sources.iter().any(|source| {
            targets.iter().any(|target| {
                source.len() <= target.len()
                    && source.iter().zip(target).all(|(a, b)| steps_may_meet(a, b))
            })
        })
    }
}

/// Whether two steps can go through the same node.
fn steps_may_meet(a: &Step, b: &Step) -> bool {
    match (a, b) {
        (Step::Wildcard, _) | (_, Step::Wildcard) => true,
        (Step::Union(options), other) | (other, Step::Union(options)) => {
            options.iter().any(|option| steps_may_meet(option, other))
        }
        (Step::Key(a), Step::Key(b)) => a == b,
        (Step::Index(a), Step::Index(b)) => a == b || *a < 0 || *b < 0,
        (Step::Key(_), Step::Index(_)) | (Step::Index(_), Step::Key(_)) => false,
    }
}

impl JsonPath {
    /// Where this path can point in the object, with `element` the reach of
    /// the enclosing `forEach` element (for `$`-rooted paths).
    pub fn reach(&self, element: &Reach) -> Reach {
        let base = match self.root {
            Root::Object => Reach::object(),
            // One kind of each shape `pod_spec_location` knows (a Pod, a
            // template, a job template, a PodTemplate); a new shape there
            // belongs here too.
            Root::PodSpec => Reach::At(
                ["Pod", "Deployment", "CronJob", "PodTemplate"]
                    .iter()
                    .filter_map(|kind| crate::plan::pod_spec_location(kind))
                    .map(|tokens| match Reach::object().extended(tokens) {
                        Reach::At(mut alternatives) => alternatives.pop().unwrap_or_default(),
                        _ => Vec::new(),
                    })
                    .collect(),
            ),
            Root::Element => element.clone(),
            Root::OldObject | Root::OldPodSpec | Root::Request | Root::Binding(_) => {
                return Reach::Nowhere;
            }
        };
        match (&self.steps, base) {
            (Steps::Simple(steps), Reach::At(alternatives)) => Reach::At(
                alternatives
                    .into_iter()
                    .map(|mut base| {
                        base.extend(steps.iter().cloned());
                        base
                    })
                    .collect(),
            ),
            (Steps::Query(_), Reach::At(_)) => Reach::Unknown,
            (_, other) => other,
        }
    }

    /// How many descendant segments (`..`) the path has.
    pub fn descendant_segments(&self) -> usize {
        match &self.steps {
            Steps::Simple(_) => 0,
            Steps::Query(query) => query
                .segments
                .iter()
                .map(|segment| {
                    let mut count = 0;
                    let mut current = segment;
                    while let Segment::Descendant(inner) = current {
                        count += 1;
                        current = inner;
                    }
                    count
                })
                .sum(),
        }
    }
}
