//! What the API server's way of running mutations can change: kadmit
//! applies the mutating rules in rule order and repeats its passes until
//! one changes nothing; the API server runs MutatingAdmissionPolicies in an
//! order it does not guarantee, calls mutating webhook entries in their
//! order, and with `reinvocationPolicy: IfNeeded` runs each at most once
//! more. So two things one call to kadmit settles can come out otherwise in
//! the cluster, and are noted per rule ([`notes`] for the policies of
//! `kadmit policies`, [`webhook_notes`] for the entries of `kadmit
//! webhook-config`):
//!
//! - a chain of three rules, where the first reads what the second writes
//!   and the second reads what the third writes: in the worst order, the
//!   first never sees the second's write;
//! - two rules writing literals (`set`, `setIfAbsent`) at overlapping
//!   locations, where the object left depends on which runs first (two
//!   `setIfAbsent`s of different values: the first wins).
//!
//! A rule reads its object selector's labels, its `when` conditions (the
//! rule set's included) and its edits', the values it copies
//! (`valueFrom`), and the elements a `forEach` or a write's path goes
//! through (those, only as far as the path goes: a write below them does
//! not change which there are). Locations are compared by their steps from
//! the object's root (`$.podSpec` at each place a pod spec sits, a path
//! inside a `forEach` after the `forEach`'s own), a wildcard meeting any
//! step, a union any of its own, a negative index any index; a path with a filter, slice or
//! descendant segment counts only up to it, and may reach anything below.
//! Two rules are compared only when some request (CREATE or UPDATE, a
//! resource) matches both; their conditions are not compared, so a note
//! says what may happen.
//!
//! Bounded: at most [`MAX_PAIR_CHECKS`] comparisons of two rules or two
//! locations, past which the search stops (and says so), and at most
//! [`MAX_NOTES`] notes of each kind.

use serde_json::{Map, Value};

use crate::patch::Token;
use crate::plan::{CompiledRule, Edit, Glob, GuardedEdit, JsonPath, Matcher, Root, Source, Step};
use crate::review::Operation;
use crate::rules::Scope;

/// The most comparisons (of two rules, of two locations) made: 10,000
/// rules would otherwise be 10^8 pairs; past it the search stops.
pub const MAX_PAIR_CHECKS: usize = 1_000_000;

/// The most notes of each kind (chains, order): beyond them the rules need
/// rework anyway.
pub const MAX_NOTES: usize = 20;

/// A note on one of the rules given to [`notes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The rule it is about, by its index in the list given.
    pub rule: usize,
    /// What may differ, naming the other rules.
    pub text: String,
}

/// Where a path can be in the object: step sequences from its root (one
/// per place a pod spec can sit). Not `exact` when a step could not be
/// followed: the location is then somewhere below those steps.
#[derive(Debug, Clone)]
struct Place {
    alternatives: Vec<Vec<Step>>,
    exact: bool,
}

impl Place {
    fn object() -> Place {
        Place {
            alternatives: vec![Vec::new()],
            exact: true,
        }
    }

    fn pod_spec() -> Place {
        // One kind of each shape `pod_spec_location` knows.
        let alternatives = ["Pod", "Deployment", "CronJob", "PodTemplate"]
            .iter()
            .filter_map(|kind| crate::plan::pod_spec_location(kind))
            .map(|tokens| tokens.iter().map(Step::from).collect())
            .collect();
        Place {
            alternatives,
            exact: true,
        }
    }

    /// The place followed by `tail`'s keys and indices.
    fn extended(mut self, tail: &[Token]) -> Place {
        if self.exact {
            for steps in &mut self.alternatives {
                steps.extend(tail.iter().map(Step::from));
            }
        }
        self
    }

    /// Where `path` can point, with `element` the place of the enclosing
    /// `forEach` element; `None` for what is not in the object.
    fn of(path: &JsonPath, element: &Place) -> Option<Place> {
        let base = match path.root() {
            Root::Object => Place::object(),
            Root::PodSpec => Place::pod_spec(),
            Root::Element => element.clone(),
            // Mutations bind no names; should one appear, anywhere.
            Root::Binding(_) => Place {
                alternatives: vec![Vec::new()],
                exact: false,
            },
            Root::OldObject | Root::OldPodSpec | Root::Request => return None,
        };
        if !base.exact {
            return Some(base);
        }
        let (steps, whole) = path.leading_steps();
        let mut place = base;
        for alternative in &mut place.alternatives {
            alternative.extend(steps.iter().cloned());
        }
        place.exact = whole;
        Some(place)
    }
}

/// Whether two steps can go through the same node.
fn steps_meet(a: &Step, b: &Step) -> bool {
    match (a, b) {
        (Step::Wildcard, _) | (_, Step::Wildcard) => true,
        (Step::Union(options), other) | (other, Step::Union(options)) => {
            options.iter().any(|option| steps_meet(option, other))
        }
        (Step::Key(a), Step::Key(b)) => a == b,
        (Step::Index(a), Step::Index(b)) => a == b || *a < 0 || *b < 0,
        (Step::Key(_), Step::Index(_)) | (Step::Index(_), Step::Key(_)) => false,
    }
}

/// Whether one of two step sequences can be at or above the other.
fn prefixes_meet(a: &[Step], b: &[Step]) -> bool {
    a.iter().zip(b).all(|(x, y)| steps_meet(x, y))
}

struct Read {
    place: Place,
    /// Only which nodes exist along the path matter.
    shape: bool,
    /// A label of the rule's objectSelector, which a webhook entry may
    /// carry: the API server then does not call the entry at all while
    /// the object lacks it.
    selector: bool,
    text: String,
}

struct Write<'p> {
    place: Place,
    text: String,
    /// A literal `set` (true) or `setIfAbsent` (false).
    literal: Option<(bool, &'p Value)>,
}

/// What one rule reads and writes.
struct Access<'p> {
    reads: Vec<Read>,
    writes: Vec<Write<'p>>,
}

fn access(rule: &CompiledRule) -> Access<'_> {
    let mut out = Access {
        reads: Vec::new(),
        writes: Vec::new(),
    };
    if let Some(selector) = &rule.matcher.object_selector {
        for key in selector.keys() {
            out.reads.push(Read {
                place: Place::object().extended(&[
                    Token::Key("metadata".into()),
                    Token::Key("labels".into()),
                    Token::Key(key.into()),
                ]),
                shape: false,
                selector: true,
                text: format!("the objectSelector's label {key:?}"),
            });
        }
    }
    let top = Place {
        alternatives: vec![Vec::new()],
        exact: false,
    };
    for predicate in &rule.when {
        predicate.for_each_path(&mut |path| value_read(path, &top, "", &mut out.reads));
    }
    edits(&rule.mutations, &top, "", &mut out);
    out
}

fn value_read(path: &JsonPath, element: &Place, within: &str, reads: &mut Vec<Read>) {
    if let Some(place) = Place::of(path, element) {
        reads.push(Read {
            place,
            shape: false,
            selector: false,
            text: format!("{within}{}", path.text()),
        });
    }
}

fn edits<'p>(list: &'p [GuardedEdit], element: &Place, within: &str, out: &mut Access<'p>) {
    for guarded in list {
        for predicate in &guarded.when {
            predicate.for_each_path(&mut |path| value_read(path, element, within, &mut out.reads));
        }
        let (target, literal, copied) = match &guarded.edit {
            Edit::Set { target, source } | Edit::SetIfAbsent { target, source } => {
                let set = matches!(guarded.edit, Edit::Set { .. });
                match source {
                    Source::Value(value) => (target, Some((set, value)), None),
                    Source::Path(path) => (target, None, Some(path)),
                }
            }
            Edit::MergeIfAbsent { target, value } => {
                // Each key merged is a write of its own: merging
                // annotations into metadata writes no labels.
                if let (Some(prefix), Some(map)) =
                    (Place::of(&target.prefix, element), value.as_object())
                {
                    out.reads.push(Read {
                        place: prefix.clone(),
                        shape: true,
                        selector: false,
                        text: format!("{within}{}", target.prefix.text()),
                    });
                    let at = prefix.extended(&target.tail);
                    for key in map.keys() {
                        out.writes.push(Write {
                            place: at.clone().extended(&[Token::Key(key.as_str().into())]),
                            text: format!("{within}{} ({key})", target.prefix.text()),
                            literal: None,
                        });
                    }
                    continue;
                }
                (target, None, None)
            }
            Edit::InjectIfMissing { target, .. } => (target, None, None),
            Edit::ForEach { path, edits: inner } => {
                let Some(place) = Place::of(path, element) else {
                    continue;
                };
                out.reads.push(Read {
                    place: place.clone(),
                    shape: true,
                    selector: false,
                    text: format!("{within}{}", path.text()),
                });
                let nested = format!("{within}forEach {} → ", path.text());
                edits(inner, &place, &nested, out);
                continue;
            }
        };
        if let Some(path) = copied {
            value_read(path, element, within, &mut out.reads);
        }
        let Some(prefix) = Place::of(&target.prefix, element) else {
            continue;
        };
        out.reads.push(Read {
            place: prefix.clone(),
            shape: true,
            selector: false,
            text: format!("{within}{}", target.prefix.text()),
        });
        out.writes.push(Write {
            place: prefix.extended(&target.tail),
            text: format!("{within}{}", target.prefix.text()),
            literal,
        });
    }
}

/// Counts comparisons against [`MAX_PAIR_CHECKS`].
struct Checks(usize);

impl Checks {
    /// Counts one; false once past the bound.
    fn one(&mut self) -> bool {
        self.0 += 1;
        self.0 <= MAX_PAIR_CHECKS
    }
}

/// Whether `write` can change what `read` gives; `None` past the bound.
fn affects(read: &Read, write: &Write<'_>, checks: &mut Checks) -> Option<bool> {
    for r in &read.place.alternatives {
        for w in &write.place.alternatives {
            if !checks.one() {
                return None;
            }
            // A write below the nodes a shape read selects changes none.
            let below = read.shape && read.place.exact && w.len() > r.len();
            if !below && prefixes_meet(r, w) {
                return Some(true);
            }
        }
    }
    Some(false)
}

/// Whether two literal writes leave different objects in the two orders;
/// `None` past the bound.
fn order_matters(a: &Write<'_>, b: &Write<'_>, checks: &mut Checks) -> Option<bool> {
    let (Some(first), Some(second)) = (a.literal, b.literal) else {
        return Some(false);
    };
    if !(a.place.exact && b.place.exact) {
        // Through a filter: the same text only.
        if !checks.one() {
            return None;
        }
        return Some(a.text == b.text && differs(&[], first, second));
    }
    for x in &a.place.alternatives {
        for y in &b.place.alternatives {
            if !checks.one() {
                return None;
            }
            if !prefixes_meet(x, y) {
                continue;
            }
            let matters = if x.len() <= y.len() {
                y.get(x.len()..)
                    .is_some_and(|rest| differs(rest, first, second))
            } else {
                x.get(y.len()..)
                    .is_some_and(|rest| differs(rest, second, first))
            };
            if matters {
                return Some(true);
            }
        }
    }
    Some(false)
}

/// Whether writing `above` (a `set` when its flag is true, else a
/// `setIfAbsent`) at a location and `below` at `rest` below it leave
/// different values there in the two orders, starting from nothing. Below
/// anything but keys, not compared.
fn differs(rest: &[Step], above: (bool, &Value), below: (bool, &Value)) -> bool {
    if !rest.iter().all(|step| matches!(step, Step::Key(_))) {
        return false;
    }
    let mut one = Value::Null;
    write_at(&mut one, &[], above);
    write_at(&mut one, rest, below);
    let mut other = Value::Null;
    write_at(&mut other, rest, below);
    write_at(&mut other, &[], above);
    one != other
}

fn write_at(node: &mut Value, rest: &[Step], (set, value): (bool, &Value)) {
    match rest.split_first() {
        None => {
            if set || node.is_null() {
                *node = value.clone();
            }
        }
        Some((Step::Key(key), more)) => {
            if node.is_null() {
                *node = Value::Object(Map::new());
            }
            if let Value::Object(map) = node {
                let child = map.entry(key.to_string()).or_insert(Value::Null);
                write_at(child, more, (set, value));
            }
        }
        Some(_) => {}
    }
}

/// The notes on `rules` (the translated mutating rules, in plan order):
/// chains of three, and writes whose order matters.
pub fn notes(rules: &[&CompiledRule]) -> Vec<Note> {
    search(rules, Calls::Policies)
}

/// Notes on `rules` served by mutating webhook entries, `entries[i]` the
/// position of rule `i`'s entry in the order the API server calls them.
/// kadmit applies the rules of one entry to a fixpoint, and the API
/// server calls the entries in their order and reinvokes each (IfNeeded)
/// at most once, so two things differ from `kadmit test` and a catch-all
/// `/mutate`:
///
/// - a rule that reads what rules of later entries write, through a
///   chain the entries' one reinvocation does not settle (a chain of
///   three in the chain's order: the third's write reinvokes the first two
///   once, in their order, so the first has run again before the second
///   writes), or whose entry the API server does not call at all because
///   its object selector (`selective[e]`: the entry has one) names a label
///   only a later entry writes. Found by running the API server's calls
///   over what each rule reads of the others' writes;
/// - two writes whose result depends on their order, in entries called in
///   the other order than kadmit applies the rules (one entry per rule set
///   in name order, unlike the rule files' order).
pub fn webhook_notes(rules: &[&CompiledRule], entries: &[usize], selective: &[bool]) -> Vec<Note> {
    search(rules, Calls::Entries(entries, selective))
}

/// How the API server calls what the rules are translated into.
#[derive(Clone, Copy)]
enum Calls<'e> {
    /// MutatingAdmissionPolicies: in an order it does not guarantee.
    Policies,
    /// Webhook entries: each rule's entry, called in this order, and
    /// whether each entry has an object selector.
    Entries(&'e [usize], &'e [bool]),
}

impl Calls<'_> {
    /// Whether the API server may run rule `second` before `first`, which
    /// kadmit applies first.
    fn may_reverse(self, first: usize, second: usize) -> bool {
        match self {
            Calls::Policies => true,
            Calls::Entries(entries, _) => match (entries.get(first), entries.get(second)) {
                (Some(first), Some(second)) => second < first,
                _ => false,
            },
        }
    }
}

fn search(rules: &[&CompiledRule], calls: Calls<'_>) -> Vec<Note> {
    let accesses: Vec<Access<'_>> = rules.iter().map(|rule| access(rule)).collect();
    let name = |i: usize| {
        rules
            .get(i)
            .map_or_else(String::new, |r| format!("{}/{}", r.rule_set_name, r.name))
    };
    let mut checks = Checks(0);
    let mut stopped = None;
    // depends[a]: (b, what a reads, what b writes there).
    let mut depends: Vec<Vec<(usize, usize, usize)>> = vec![Vec::new(); rules.len()];
    let mut order: Vec<Note> = Vec::new();
    'pairs: for (a, rule_a) in rules.iter().enumerate() {
        for (b, rule_b) in rules.iter().enumerate() {
            if a == b {
                continue;
            }
            if !checks.one() {
                stopped = Some(a);
                break 'pairs;
            }
            if !common_request(&rule_a.matcher, &rule_b.matcher) {
                continue;
            }
            let (Some(x), Some(y)) = (accesses.get(a), accesses.get(b)) else {
                continue;
            };
            'reads: for (r, read) in x.reads.iter().enumerate() {
                for (w, write) in y.writes.iter().enumerate() {
                    match affects(read, write, &mut checks) {
                        None => {
                            stopped = Some(a);
                            break 'pairs;
                        }
                        Some(true) => {
                            if let Some(list) = depends.get_mut(a) {
                                list.push((b, r, w));
                            }
                            break 'reads;
                        }
                        Some(false) => {}
                    }
                }
            }
            // Each pair once, noted on the rule kadmit applies second.
            if a < b || order.len() >= MAX_NOTES || !calls.may_reverse(b, a) {
                continue;
            }
            'writes: for first in &y.writes {
                for second in &x.writes {
                    match order_matters(first, second, &mut checks) {
                        None => {
                            stopped = Some(a);
                            break 'pairs;
                        }
                        Some(true) => {
                            let how = match calls {
                                Calls::Policies => {
                                    "the API server runs the policies in an order it does not \
                                     guarantee, so the cluster may leave another value than \
                                     `kadmit test` shows"
                                }
                                Calls::Entries(..) => {
                                    "the API server calls this rule's webhook entry first, so \
                                     the cluster leaves another value than `kadmit test` shows"
                                }
                            };
                            order.push(Note {
                                rule: a,
                                text: format!(
                                    "it writes {} and {} writes {}, at overlapping locations, \
                                     with a result that depends on which runs first: kadmit \
                                     applies {} first (rule order), {how}",
                                    describe(second),
                                    name(b),
                                    describe(first),
                                    name(b),
                                ),
                            });
                            break 'writes;
                        }
                        Some(false) => {}
                    }
                }
            }
        }
    }
    let mut out = Vec::new();
    if let Calls::Entries(entries, selective) = calls {
        out = unsettled_by_entries(&depends, &accesses, entries, selective)
            .into_iter()
            .take(MAX_NOTES)
            .map(|(a, b, r, w)| {
                let read = accesses
                    .get(a)
                    .and_then(|x| x.reads.get(r))
                    .map_or("", |read| read.text.as_str());
                let wrote = accesses
                    .get(b)
                    .and_then(|x| x.writes.get(w))
                    .map_or("", |write| write.text.as_str());
                Note {
                    rule: a,
                    text: format!(
                        "it reads {read} where {} writes {wrote}, in a webhook entry the API \
                         server calls later; kadmit repeats its passes until nothing changes, \
                         but the API server calls the entries in order and reinvokes each \
                         (IfNeeded) at most once, and never calls an entry for the first time \
                         then, so in the cluster this rule does not see what {} writes \
                         (`kadmit test` and a catch-all /mutate do): put the rule sets in the \
                         other order, give them the same entry settings, or use --single",
                        name(b),
                        name(b),
                    ),
                }
            })
            .collect();
    }
    for (a, list) in depends.iter().enumerate() {
        if out.len() >= MAX_NOTES || matches!(calls, Calls::Entries(..)) {
            break;
        }
        let chain = list.iter().find_map(|&(b, r, w)| {
            depends
                .get(b)?
                .iter()
                .find(|&&(c, _, _)| c != a && c != b)
                .map(|&(c, r2, w2)| (b, r, w, c, r2, w2))
        });
        let Some((b, r, w, c, r2, w2)) = chain else {
            continue;
        };
        let read = |rule: usize, i: usize| {
            accesses
                .get(rule)
                .and_then(|x| x.reads.get(i))
                .map_or("", |read| read.text.as_str())
        };
        let wrote = |rule: usize, i: usize| {
            accesses
                .get(rule)
                .and_then(|x| x.writes.get(i))
                .map_or("", |write| write.text.as_str())
        };
        let how = "the API server runs the policies in an order it does not guarantee and \
                   reinvokes each (IfNeeded) at most once, so in the cluster this rule may not \
                   see what the chain writes";
        out.push(Note {
            rule: a,
            text: format!(
                "a chain of three mutating rules: it reads {} where {} writes {}, and {} reads \
                 {} where {} writes {}; kadmit repeats its passes until nothing changes, but {how}",
                read(a, r),
                name(b),
                wrote(b, w),
                name(b),
                read(b, r2),
                name(c),
                wrote(c, w2),
            ),
        });
    }
    out.extend(order);
    if let Some(at) = stopped {
        out.push(Note {
            rule: at,
            text: format!(
                "the search for chains and order-dependent writes among the mutating rules \
                 stopped at this rule, after {MAX_PAIR_CHECKS} comparisons: the rules after it \
                 were not all compared"
            ),
        });
    }
    out
}

/// The rules that read what another rule writes and, called as the API
/// server calls webhook entries, never run after that rule has settled,
/// though kadmit's passes over all of them would settle them: each with
/// the rule it waits for, what it reads and what that one writes.
///
/// A rule settles in a call when every rule it reads the writes of has
/// settled, in an earlier call or earlier in the same one (an entry's
/// rules run to a fixpoint). The entries are called in order; an entry
/// with an object selector whose labels a rule not yet settled writes is
/// not called (the API server would not send it the object). Then each
/// entry called is called once more, in order, as `reinvocationPolicy:
/// IfNeeded` has it; an entry not called the first time is not then.
/// Rules in a cycle never settle either way and are left out.
fn unsettled_by_entries(
    depends: &[Vec<(usize, usize, usize)>],
    accesses: &[Access<'_>],
    entries: &[usize],
    selective: &[bool],
) -> Vec<(usize, usize, usize, usize)> {
    let count = depends.len();
    let waits_on = |settled: &[bool], rule: usize, only_selector: bool| {
        depends
            .get(rule)
            .into_iter()
            .flatten()
            .find(|&&(other, read, _)| {
                !settled.get(other).copied().unwrap_or(true)
                    && (!only_selector
                        || accesses
                            .get(rule)
                            .and_then(|access| access.reads.get(read))
                            .is_some_and(|read| read.selector))
            })
    };
    // Runs `rules` to a fixpoint over `settled`.
    let run = |settled: &mut Vec<bool>, rules: &[usize]| loop {
        let mut changed = false;
        for &rule in rules {
            if !settled[rule] && waits_on(settled, rule, false).is_none() {
                settled[rule] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    };
    // kadmit: every rule, passes until nothing changes.
    let mut by_kadmit = vec![false; count];
    run(&mut by_kadmit, &(0..count).collect::<Vec<_>>());
    // The API server.
    let entry_count = entries.iter().max().map_or(0, |last| last + 1);
    let mut in_entry: Vec<Vec<usize>> = vec![Vec::new(); entry_count];
    for (rule, &entry) in entries.iter().enumerate().take(count) {
        if let Some(list) = in_entry.get_mut(entry) {
            list.push(rule);
        }
    }
    let mut settled = vec![false; count];
    let mut called = vec![false; entry_count];
    for (entry, rules) in in_entry.iter().enumerate() {
        let held_back = selective.get(entry).copied().unwrap_or(false)
            && rules
                .iter()
                .any(|&rule| waits_on(&settled, rule, true).is_some());
        if !held_back {
            called[entry] = true;
            run(&mut settled, rules);
        }
    }
    for (entry, rules) in in_entry.iter().enumerate() {
        if called[entry] {
            run(&mut settled, rules);
        }
    }
    (0..count)
        .filter(|&rule| by_kadmit[rule] && !settled[rule])
        .filter_map(|rule| {
            let &(other, read, write) = waits_on(&settled, rule, false)
                .or_else(|| depends.get(rule).and_then(|list| list.first()))?;
            Some((rule, other, read, write))
        })
        .collect()
}

fn describe(write: &Write<'_>) -> String {
    match write.literal {
        Some((true, value)) => format!("{} (set to {value})", write.text),
        Some((false, value)) => format!("{} (setIfAbsent {value})", write.text),
        None => write.text.clone(),
    }
}

/// Whether a CREATE or UPDATE of some resource matches both.
fn common_request(a: &Matcher, b: &Matcher) -> bool {
    let operation = [Operation::Create, Operation::Update]
        .into_iter()
        .any(|op| a.has_operation(op) && b.has_operation(op));
    operation
        && !disjoint_namespaces(&a.namespaces, &b.namespaces)
        && a.resources.iter().any(|x| {
            b.resources.iter().any(|y| {
                let scopes = match (x.scope, y.scope) {
                    (Scope::All, _) | (_, Scope::All) => true,
                    (p, q) => p == q,
                };
                scopes
                    && any_meet(&x.groups, &y.groups)
                    && any_meet(&x.versions, &y.versions)
                    && x.resources.iter().any(|(name, sub)| {
                        y.resources
                            .iter()
                            .any(|(other, other_sub)| meet(name, other) && meet(sub, other_sub))
                    })
            })
        })
}

/// Whether two rules' namespace lists can match no namespace in common:
/// both name exact namespaces only, none of them the same.
fn disjoint_namespaces(a: &[Glob], b: &[Glob]) -> bool {
    let exact = |globs: &[Glob]| -> Option<Vec<String>> {
        globs
            .iter()
            .map(|glob| match glob {
                Glob::Exact(name) => Some(name.clone()),
                _ => None,
            })
            .collect()
    };
    match (exact(a), exact(b)) {
        (Some(x), Some(y)) if !x.is_empty() && !y.is_empty() => {
            !x.iter().any(|name| y.contains(name))
        }
        _ => false,
    }
}

fn any_meet(x: &[String], y: &[String]) -> bool {
    x.iter().any(|a| y.iter().any(|b| meet(a, b)))
}

fn meet(a: &str, b: &str) -> bool {
    a == "*" || b == "*" || a == b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notes_of(rules: &str) -> Vec<(String, String)> {
        let plan = crate::plan::test_plan(rules);
        let list: Vec<&CompiledRule> = plan.rules().iter().collect();
        notes(&list)
            .into_iter()
            .map(|note| (list[note.rule].name.to_string(), note.text))
            .collect()
    }

    #[test]
    fn a_chain_of_three_is_noted_on_its_first_rule() {
        let found = notes_of(
            "    - name: r1
      match: {resources: [configmaps]}
      when: [{path: $.object.metadata.labels.b, exists: true}]
      mutate:
        - setIfAbsent: {path: $.object.metadata.labels.a, value: set}
    - name: r2
      match: {resources: [configmaps]}
      when: [{path: $.object.metadata.labels.c, exists: true}]
      mutate:
        - setIfAbsent: {path: $.object.metadata.labels.b, value: set}
    - name: r3
      match: {resources: [configmaps]}
      mutate:
        - setIfAbsent: {path: $.object.metadata.labels.c, value: set}
",
        );
        let [(rule, text)] = found.as_slice() else {
            panic!("{found:?}");
        };
        assert_eq!(rule, "r1");
        assert!(
            text.contains("t/r2 writes $.object.metadata.labels.b")
                && text.contains("t/r3 writes $.object.metadata.labels.c"),
            "{text}"
        );
    }

    #[test]
    fn a_chain_of_two_or_of_other_resources_is_not() {
        let two = "    - name: label
      match: {resources: [pods]}
      mutate:
        - setIfAbsent: {path: $.object.metadata.labels.team, value: unassigned}
    - name: note
      match: {resources: [pods]}
      when: [{path: $.object.metadata.labels.team, equals: unassigned}]
      mutate:
        - setIfAbsent: {path: \"$.object.metadata.annotations['defaulted']\", value: 'true'}
";
        assert_eq!(notes_of(two), []);
        let three = format!(
            "{two}    - name: last
      match: {{resources: [configmaps]}}
      when: [{{path: \"$.object.metadata.annotations['defaulted']\", exists: true}}]
      mutate:
        - setIfAbsent: {{path: $.object.metadata.labels.x, value: y}}
"
        );
        assert_eq!(notes_of(&three), []);
        // Through a forEach, below what a shape read selects: no chain.
        let shape = "    - name: a
      match: {resources: [pods]}
      mutate:
        - forEach: $.podSpec.containers[*]
          mutate:
            - setIfAbsent: {path: $.securityContext.runAsNonRoot, value: true}
    - name: b
      match: {resources: [pods]}
      mutate:
        - setIfAbsent: {path: \"$.podSpec.containers[*].resources.requests.cpu\", value: 1}
    - name: c
      match: {resources: [pods]}
      mutate:
        - setIfAbsent: {path: \"$.podSpec.containers[*].resources.limits.cpu\", value: 1}
";
        assert_eq!(notes_of(shape), []);
    }

    #[test]
    fn a_chain_through_a_for_each_and_a_pod_spec_is_noted() {
        let found = notes_of(
            "    - name: per-container
      match: {resources: [pods]}
      mutate:
        - forEach: $.podSpec.containers[*]
          mutate:
            - setIfAbsent: {path: $.x, value: 1}
    - name: inject
      match: {resources: [pods]}
      when: [{path: $.object.metadata.labels.sidecar, exists: true}]
      mutate:
        - injectIfMissing: {path: $.podSpec.containers, key: name, value: {name: s}}
    - name: label
      match: {resources: [pods]}
      mutate:
        - setIfAbsent: {path: $.object.metadata.labels.sidecar, value: 'on'}
",
        );
        let [(rule, text)] = found.as_slice() else {
            panic!("{found:?}");
        };
        assert_eq!(rule, "per-container");
        assert!(
            text.contains("t/inject writes $.podSpec.containers"),
            "{text}"
        );
    }

    #[test]
    fn writes_whose_order_matters_are_noted_on_the_second() {
        let found = notes_of(
            "    - name: zz-default-team
      match: {resources: [configmaps]}
      mutate:
        - setIfAbsent: {path: $.object.metadata.labels.team, value: platform}
    - name: aa-fallback-team
      match: {resources: [configmaps]}
      mutate:
        - setIfAbsent: {path: $.object.metadata.labels.team, value: unassigned}
",
        );
        let [(rule, text)] = found.as_slice() else {
            panic!("{found:?}");
        };
        assert_eq!(rule, "aa-fallback-team");
        assert!(
            text.contains(
                "t/zz-default-team writes $.object.metadata.labels.team (setIfAbsent \"platform\")"
            ) && text.contains("kadmit applies t/zz-default-team first"),
            "{text}"
        );
        // A parent and a child it does not hold; the same value; a set and a
        // setIfAbsent (the set wins either way).
        let pair = |first: &str, second: &str| {
            notes_of(&format!(
                "    - name: one\n      match: {{resources: [pods]}}\n      mutate:\n        - {first}\n    - name: two\n      match: {{resources: [pods]}}\n      mutate:\n        - {second}\n"
            ))
            .len()
        };
        let label = "setIfAbsent: {path: $.object.metadata.labels.team, value: b}";
        assert_eq!(
            pair(
                "setIfAbsent: {path: $.object.metadata.labels, value: {team: a}}",
                label
            ),
            1
        );
        assert_eq!(
            pair(
                "setIfAbsent: {path: $.object.metadata.labels, value: {team: b}}",
                label
            ),
            0
        );
        assert_eq!(pair(label, label), 0);
        assert_eq!(
            pair(
                "set: {path: $.object.metadata.labels.team, value: a}",
                label
            ),
            0
        );
        assert_eq!(
            pair(
                "setIfAbsent: {path: \"$.podSpec.containers[*].x\", value: 1}",
                "setIfAbsent: {path: \"$.object.spec.containers[0].x\", value: 2}"
            ),
            1
        );
    }

    #[test]
    fn thousands_of_rules_are_compared_within_the_bound() {
        let rules: String = (0..1500)
            .map(|i| {
                format!(
                    "    - name: r{i}
      match: {{resources: [pods]}}
      when: [{{path: $.object.metadata.labels.l{}, exists: true}}]
      mutate:
        - setIfAbsent: {{path: $.object.metadata.labels.l{i}, value: v{i}}}
",
                    i + 1
                )
            })
            .collect();
        let found = notes_of(&rules);
        assert_eq!(found.len(), MAX_NOTES + 1, "{}", found.len());
        assert!(
            found
                .last()
                .is_some_and(|(_, text)| text.contains("stopped at this rule")),
            "{found:?}"
        );
    }
}
