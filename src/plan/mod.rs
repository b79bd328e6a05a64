//! The immutable compiled form of a set of rule files: every regex, path,
//! template and quantity compiled once, and rules indexed by (operation, API
//! group, resource, subresource) so a review only visits rules that can match.
//!
//! A [`Plan`] is `Send + Sync` and never changes once built; a rule change
//! builds a new plan and swaps it in.

mod compile;
mod conflicts;
mod dotted;
pub mod fields;
mod filters;
mod index;
mod matcher;
pub mod openapi;
pub mod path;
mod patterns;
pub mod projection;
mod template;
mod value_list;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use arc_swap::ArcSwap;

use serde_json::Value;

use crate::patch::Token;
use crate::quantity::Quantity;
use crate::review::Request;
use crate::rules::{Action, Diagnostics, ImagePart};

pub use compile::{compile, compile_with};
pub use fields::Fields;
pub use index::Index;
pub use matcher::ResourceMatch;
pub use matcher::{Charge, Glob, LabelMatcher, Matcher, Mismatch, OverBudget, RequestKey};
pub use path::{JsonPath, MAX_PATH_STEPS, PathScope, ReadKind, Root, Step};
pub use patterns::{MAX_ONE_REGEX_BYTES, MAX_REGEX_PATTERN_BYTES, Pattern};
pub(crate) use patterns::{RegexProblem, tiered_pattern};
pub use projection::{KindProjections, ObjectProjections, Place, Placed, Projection};
pub use template::Template;
pub use value_list::{SCANNED_VALUES, ValueIndex, ValueList};

/// The most groups of rule sets whose projections a plan builds (see
/// [`Plan::projections_of`]): a client may name any group of the plan's
/// rule sets in a path, and each costs about what the plan's own
/// projections cost.
pub const MAX_GROUP_PROJECTIONS: usize = 64;

/// The projections of a group of rule sets, by mode.
type GroupProjections = (Box<[RuleSetId]>, Arc<[KindProjections; 2]>);

/// What the rules of one mode read, for one endpoint: the plan's, or a
/// group of rule sets' built on demand.
#[derive(Debug)]
pub enum ModeProjections<'p> {
    /// Built with the plan.
    Plan(&'p KindProjections),
    /// A group's, by mode, and the mode's index.
    Group(Arc<[KindProjections; 2]>, usize),
}

impl ModeProjections<'_> {
    /// What is read of the objects of a review of `kind` (see
    /// [`Plan::projections`]).
    pub fn of_kind(&self, kind: &str) -> &ObjectProjections {
        match self {
            ModeProjections::Plan(projections) => projections.of_kind(kind),
            ModeProjections::Group(by_mode, mode) => {
                let projections = by_mode.get(*mode).unwrap_or(&by_mode[0]);
                projections.of_kind(kind)
            }
        }
    }
}

/// Identifies a rule set within a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RuleSetId(pub u32);

/// The rule sets a review is evaluated against: every one (`/validate`),
/// one (`/validate/images`), or the several a grouped webhook entry names
/// (`/validate/images.services`). Borrowed, so it is `Copy` and costs no
/// allocation per rule checked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RuleSets<'a> {
    /// Every rule set of the plan.
    #[default]
    All,
    /// One rule set.
    One(RuleSetId),
    /// These rule sets (a handful: a webhook path names at most as many as
    /// fit in 253 bytes).
    Several(&'a [RuleSetId]),
}

impl RuleSets<'_> {
    /// Whether the rules of `id` are evaluated.
    pub fn contains(self, id: RuleSetId) -> bool {
        match self {
            RuleSets::All => true,
            RuleSets::One(one) => one == id,
            RuleSets::Several(ids) => ids.contains(&id),
        }
    }
}

impl From<Option<RuleSetId>> for RuleSets<'_> {
    fn from(id: Option<RuleSetId>) -> Self {
        id.map_or(RuleSets::All, RuleSets::One)
    }
}

impl From<RuleSetId> for RuleSets<'_> {
    fn from(id: RuleSetId) -> Self {
        RuleSets::One(id)
    }
}

impl<'a> From<&'a [RuleSetId]> for RuleSets<'a> {
    fn from(ids: &'a [RuleSetId]) -> Self {
        match ids {
            [one] => RuleSets::One(*one),
            _ => RuleSets::Several(ids),
        }
    }
}

/// What a plan knows about one of its rule sets.
#[derive(Debug, Clone)]
pub struct RuleSetInfo {
    /// The rule set's name.
    pub name: Arc<str>,
    /// The file it came from.
    pub file: Arc<str>,
    /// Content hash of that file.
    pub file_hash: String,
    /// Number of rules.
    pub rule_count: usize,
    /// What the API server does when kadmit cannot answer.
    pub failure_policy: Option<crate::rules::FailurePolicy>,
    /// The webhook timeout, in seconds.
    pub timeout_seconds: Option<u32>,
    /// The namespace selector its webhook entry carries.
    pub namespace_selector: Option<crate::rules::LabelSelector>,
    /// Its `matchConditions`, as written (its rules check them as guards).
    pub match_conditions: Vec<crate::rules::MatchCondition>,
}

/// The compiled rules.
#[derive(Debug, Default)]
pub struct Plan {
    generation: u64,
    rule_sets: Vec<RuleSetInfo>,
    rules: Vec<CompiledRule>,
    validating: Index,
    mutating: Index,
    /// By [`Mode`]: validating, mutating.
    projections: [KindProjections; 2],
    /// The same for the rules of each rule set (by [`RuleSetId`]), when
    /// there are several: what a webhook path naming one reads.
    set_projections: Vec<[KindProjections; 2]>,
    /// The same for the groups of rule sets that grouped webhook paths
    /// (`/validate/images.services`) have named, built when first asked,
    /// at most [`MAX_GROUP_PROJECTIONS`] of them. Read without a lock: a
    /// request to a grouped path only loads the list.
    group_projections: ArcSwap<Vec<GroupProjections>>,
    request_fields: RequestFields,
    warnings: Diagnostics,
    guard_groups: usize,
    shared_selections: usize,
}

impl Plan {
    /// How many groups of rules share their guards
    /// ([`CompiledRule::guard_group`]).
    pub fn guard_groups(&self) -> usize {
        self.guard_groups
    }

    /// How many distinct document paths the rules' own `forEach` entries
    /// select ([`DenyCheck::ForEach`]'s `shared`).
    pub fn shared_selections(&self) -> usize {
        self.shared_selections
    }

    /// Numbers the rules' own document-level `forEach` paths, the same
    /// number for the same root and text.
    fn number_shared_selections(&mut self) {
        let mut numbers: HashMap<(Root, String), usize> = HashMap::new();
        for rule in &mut self.rules {
            for check in &mut rule.deny {
                if let DenyCheck::ForEach {
                    path,
                    entries: false,
                    shared,
                    ..
                } = check
                    && path.root().is_document()
                {
                    let next = numbers.len();
                    *shared = Some(
                        *numbers
                            .entry((path.root(), path.text().to_owned()))
                            .or_insert(next),
                    );
                }
            }
        }
        self.shared_selections = numbers.len();
    }

    /// A new guard group's number: one per rule set, and one per set a
    /// rule set includes.
    fn new_guard_group(&mut self) -> usize {
        let group = self.guard_groups;
        self.guard_groups += 1;
        group
    }

    /// The generation number the store gave this plan.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Sets the generation before the plan is shared.
    pub fn with_generation(mut self, generation: u64) -> Self {
        self.generation = generation;
        self
    }

    /// False when no rule can read, write or select anything at, above or
    /// below `metadata.managedFields` of the object or old object, so
    /// `kadmit audit` may leave that field out when it parses objects (the
    /// server parses only what [`Plan::projections`] keep).
    pub fn reads_managed_fields(&self) -> bool {
        self.projections.iter().any(|projections| {
            projections
                .of_kind("")
                .keeps(&["metadata", "managedFields"])
        })
    }

    /// What the rules of `mode` can read of the objects of a review of
    /// `kind` (`""` while the kind is not known: then for every kind): the
    /// server parses only that ([`projection`]).
    pub fn projections(&self, mode: Mode, kind: &str) -> &ObjectProjections {
        self.projections[usize::from(mode == Mode::Mutate)].of_kind(kind)
    }

    /// What the rules of `mode` in `rule_sets` can read of the objects (see
    /// [`Plan::projections`]): a path naming some rule sets parses only
    /// what their rules read, so that what another set's rules read (an
    /// object part nested past what kadmit parses, say) cannot make the
    /// review of these fail.
    pub fn projections_of(&self, mode: Mode, rule_sets: RuleSets<'_>) -> ModeProjections<'_> {
        let mode = usize::from(mode == Mode::Mutate);
        let whole = ModeProjections::Plan(&self.projections[mode]);
        match rule_sets {
            RuleSets::All => whole,
            RuleSets::One(id) => usize::try_from(id.0)
                .ok()
                .and_then(|i| self.set_projections.get(i))
                .map_or(whole, |by_mode| ModeProjections::Plan(&by_mode[mode])),
            RuleSets::Several(ids) => match self.group_projections_of(ids) {
                Some(group) => ModeProjections::Group(group, mode),
                None => whole,
            },
        }
    }

    /// The projections of the rules of the rule sets `ids`, built on the
    /// first request for them; `None` when the plan has one rule set, or
    /// when [`MAX_GROUP_PROJECTIONS`] groups are built already (paths
    /// naming other groups then parse what every rule reads).
    fn group_projections_of(&self, ids: &[RuleSetId]) -> Option<Arc<[KindProjections; 2]>> {
        if self.set_projections.is_empty() {
            return None;
        }
        let find = |groups: &[GroupProjections]| {
            groups
                .iter()
                .find(|(group, _)| **group == *ids)
                .map(|(_, built)| Arc::clone(built))
        };
        let groups = self.group_projections.load();
        if let Some(built) = find(&groups) {
            return Some(built);
        }
        if groups.len() >= MAX_GROUP_PROJECTIONS {
            return None;
        }
        drop(groups);
        // Built outside any lock; when two requests build the same group
        // at once, the first one stored is kept and the other dropped.
        let rule_sets = RuleSets::Several(ids);
        let built = Arc::new(self.projections_where(|rule| rule_sets.contains(rule.rule_set)));
        let mut kept = None;
        self.group_projections.rcu(|groups| {
            kept = find(groups);
            let mut next = Vec::clone(groups);
            if kept.is_none() && groups.len() < MAX_GROUP_PROJECTIONS {
                next.push((ids.into(), Arc::clone(&built)));
                kept = Some(Arc::clone(&built));
            }
            next
        });
        kept
    }

    /// The projections, by mode, of the rules `keep` keeps.
    fn projections_where(&self, keep: impl Fn(&CompiledRule) -> bool) -> [KindProjections; 2] {
        [Mode::Validate, Mode::Mutate].map(|mode| {
            KindProjections::build(|projections| {
                for rule in self
                    .rules
                    .iter()
                    .filter(|rule| rule.has_work(mode) && keep(rule))
                {
                    rule.project(projections);
                }
            })
        })
    }

    /// The warnings compiling found (paths no matched kind has), in file
    /// order: they did not keep the plan from being built.
    pub fn warnings(&self) -> &Diagnostics {
        &self.warnings
    }

    /// The members of the `request` document some rule reads.
    pub fn request_fields(&self) -> RequestFields {
        self.request_fields
    }

    /// Looks up a rule set by name.
    pub fn rule_set_id(&self, name: &str) -> Option<RuleSetId> {
        self.rule_sets
            .iter()
            .position(|info| &*info.name == name)
            .and_then(|i| u32::try_from(i).ok())
            .map(RuleSetId)
    }

    /// The name of rule set `id`.
    pub fn rule_set_name(&self, id: RuleSetId) -> Option<&Arc<str>> {
        usize::try_from(id.0)
            .ok()
            .and_then(|i| self.rule_sets.get(i))
            .map(|info| &info.name)
    }

    /// The rule sets, in load order.
    pub fn rule_sets(&self) -> &[RuleSetInfo] {
        &self.rule_sets
    }

    /// Every rule, in plan order (file name, then position).
    pub fn rules(&self) -> &[CompiledRule] {
        &self.rules
    }

    /// The rule with index `number` (as [`Plan::candidates`] returns them).
    pub fn rule(&self, number: u32) -> Option<&CompiledRule> {
        usize::try_from(number).ok().and_then(|i| self.rules.get(i))
    }

    /// Whether a rule of either half names `request`'s resource (group,
    /// resource and subresource) itself, not through a wildcard.
    pub fn names_resource(&self, request: &Request) -> bool {
        let (group, resource, sub) = (
            &request.resource.group,
            &request.resource.resource,
            request.sub_resource(),
        );
        self.validating.names(group, resource, sub) || self.mutating.names(group, resource, sub)
    }

    /// Indices of the rules that can apply to a request with `key` for
    /// `mode`, in plan order, judged by operation and resource alone.
    pub fn candidates(&self, mode: Mode, key: &RequestKey<'_>) -> Vec<u32> {
        let index = match mode {
            Mode::Validate => &self.validating,
            Mode::Mutate => &self.mutating,
        };
        index.lookup(
            key.operation(),
            key.group(),
            key.resource(),
            key.sub_resource(),
        )
    }
}

/// Which half of the webhook is asking: the plan keeps one index per half.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// `/validate`: deny, warn and audit rules.
    Validate,
    /// `/mutate`: mutations only.
    Mutate,
}

impl Mode {
    /// Lowercase name for labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Validate => "validate",
            Mode::Mutate => "mutate",
        }
    }
}

/// One compiled rule.
#[derive(Debug)]
pub struct CompiledRule {
    /// The rule set it belongs to.
    pub rule_set: RuleSetId,
    /// That rule set's name.
    pub rule_set_name: Arc<str>,
    /// The rule's name.
    pub name: Arc<str>,
    /// Request-level match criteria.
    pub matcher: Matcher,
    /// Extra conditions, all of which must hold: first the rule set's
    /// guards, then the rule's own `when`.
    pub when: Conditions,
    /// Rules whose guards were compiled from the same rule sets share a
    /// group, numbered from 0 up to [`Plan::guard_groups`], so that one
    /// evaluation checks the guards once for all of them.
    pub guard_group: usize,
    /// Deny entries.
    pub deny: Vec<DenyCheck>,
    /// Mutations.
    pub mutations: Vec<GuardedEdit>,
    /// What violations do.
    pub action: Action,
    /// Status code of a denial.
    pub code: u16,
}

/// Which members of the `request` document (`$.request...` paths) the rules
/// read, so an evaluation builds only those.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestFields(u16);

impl RequestFields {
    /// The members of the `request` document, in the order it is built.
    pub const NAMES: [&'static str; 13] = [
        "uid",
        "kind",
        "resource",
        "subResource",
        "requestKind",
        "requestResource",
        "requestSubResource",
        "name",
        "namespace",
        "operation",
        "userInfo",
        "dryRun",
        "options",
    ];

    /// Every member.
    pub const ALL: RequestFields = RequestFields((1 << Self::NAMES.len()) - 1);

    /// True when the member `name` is read.
    pub fn contains(self, name: &str) -> bool {
        Self::NAMES
            .iter()
            .position(|known| *known == name)
            .is_some_and(|i| self.0 & (1 << i) != 0)
    }

    /// The members `path`, read from the request document, can reach; every
    /// member when its first step is not a plain name.
    fn of(path: &JsonPath) -> RequestFields {
        if path.root() != Root::Request {
            return RequestFields::default();
        }
        let Some(keys) = path.first_keys() else {
            return RequestFields::ALL;
        };
        let mut bits = 0;
        for key in keys {
            if let Some(i) = Self::NAMES.iter().position(|known| *known == key) {
                bits |= 1 << i;
            }
        }
        RequestFields(bits)
    }

    /// What the member `name` holds, `None` when it is not one.
    pub(crate) fn member(name: &str) -> Option<RequestMember> {
        const GROUP_VERSION_KIND: &[&str] = &["group", "version", "kind"];
        const GROUP_VERSION_RESOURCE: &[&str] = &["group", "version", "resource"];
        match name {
            "userInfo" => Some(RequestMember::Fields(&[
                "username", "uid", "groups", "extra",
            ])),
            "kind" | "requestKind" => Some(RequestMember::Fields(GROUP_VERSION_KIND)),
            "resource" | "requestResource" => Some(RequestMember::Fields(GROUP_VERSION_RESOURCE)),
            "dryRun" => Some(RequestMember::Scalar("a boolean")),
            "options" => Some(RequestMember::Open),
            _ if Self::NAMES.contains(&name) => Some(RequestMember::Scalar("a string")),
            _ => None,
        }
    }
}

/// What a member of the `request` document holds ([`RequestFields::member`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestMember {
    /// An object with these fields (`userInfo`, `kind`, `resource`, ...).
    Fields(&'static [&'static str]),
    /// A single value, described (`a string`): nothing is below it.
    Scalar(&'static str),
    /// Whatever the request carries (`options`).
    Open,
}

/// A rule's conditions: the guards of its rule set (its `matchConditions`
/// and `when`, and those of the set that included it), compiled once and
/// shared by every rule of the same [`CompiledRule::guard_group`], then
/// the rule's own `when`.
///
/// Shared, not copied: a set's guards can hold long literals, and a set
/// thousands of rules.
#[derive(Debug)]
pub struct Conditions {
    guards: Arc<[Predicate]>,
    own: Vec<Predicate>,
}

impl Conditions {
    /// The set's guards, shared, followed by the rule's own conditions.
    pub fn new(guards: Arc<[Predicate]>, own: Vec<Predicate>) -> Self {
        Conditions { guards, own }
    }

    /// The rule set's guards.
    pub fn guards(&self) -> &[Predicate] {
        &self.guards
    }

    /// The rule's own `when`.
    pub fn own(&self) -> &[Predicate] {
        &self.own
    }

    /// Every condition, guards first.
    pub fn iter(&self) -> impl Iterator<Item = &Predicate> {
        self.guards.iter().chain(&self.own)
    }

    /// True when there is no condition at all.
    pub fn is_empty(&self) -> bool {
        self.guards.is_empty() && self.own.is_empty()
    }

    /// Whether both hold the very same guards, not equal copies.
    pub fn shares_guards_with(&self, other: &Conditions) -> bool {
        Arc::ptr_eq(&self.guards, &other.guards)
    }
}

impl<'a> IntoIterator for &'a Conditions {
    type Item = &'a Predicate;
    type IntoIter =
        std::iter::Chain<std::slice::Iter<'a, Predicate>, std::slice::Iter<'a, Predicate>>;

    fn into_iter(self) -> Self::IntoIter {
        self.guards.iter().chain(self.own.iter())
    }
}

impl CompiledRule {
    /// Calls `f` with every path of the rule (and, for a write, the names
    /// and indices below its prefix): its guards, its checks and its
    /// edits. Paths from a `forEach` element come after their `forEach`'s
    /// path; the object selector, which reads only `metadata.labels`, is
    /// not a path.
    fn for_each_path(&self, f: &mut impl FnMut(&JsonPath, &[Token])) {
        for predicate in &self.when {
            predicate.for_each_path(&mut |path| f(path, &[]));
        }
        deny_paths(&self.deny, f);
        edit_paths(&self.mutations, f);
    }

    /// The members of the `request` document the rule reads.
    fn request_fields(&self) -> RequestFields {
        let mut fields = RequestFields::default();
        self.for_each_path(&mut |path, _| fields.0 |= RequestFields::of(path).0);
        fields
    }

    /// Whether evaluating the rule can fail, which denies the review
    /// whatever the rule's action: a CEL expression in a check or in a
    /// guard whose failure denies (a `when`, a match condition of a set
    /// under `failurePolicy: Fail`). A `messageExpression` that fails falls
    /// back to the message, and nothing else fails.
    pub fn can_fail(&self) -> bool {
        self.when.iter().any(Predicate::can_fail) || checks_can_fail(&self.deny)
    }

    /// Whether the rule has work in `mode`: deny entries to validate,
    /// mutations to mutate.
    pub fn has_work(&self, mode: Mode) -> bool {
        match mode {
            Mode::Validate => !self.deny.is_empty(),
            Mode::Mutate => !self.mutations.is_empty(),
        }
    }

    /// Adds what the rule can read of the objects to `projections`: its
    /// object selector (the labels), its guards, its checks and its edits.
    pub(crate) fn project(&self, projections: &mut ObjectProjections) {
        if self.matcher.object_selector.is_some() {
            projections.add_both(&[Step::Key("metadata".into()), Step::Key("labels".into())]);
        }
        for predicate in &self.when {
            predicate.for_each_path(&mut |path| projections.add_path(path, &[]));
        }
        project_checks(&self.deny, None, projections);
        project_edits(&self.mutations, None, projections);
    }
}

/// Adds what `checks` can read to `projections`; within a `forEach` whose
/// path leads plainly to its elements (`element`), an element keeps only
/// what the checks and their messages read of it (see [`project_edits`]).
fn project_checks(
    checks: &[DenyCheck],
    element: Option<&Place>,
    projections: &mut ObjectProjections,
) {
    for check in checks {
        match check {
            DenyCheck::Entry { .. } => {
                deny_paths(std::slice::from_ref(check), &mut |path, tail| {
                    projections.add_path_within(path, tail, &[], element);
                })
            }
            DenyCheck::ForEach {
                path,
                checks,
                entries,
                ..
            } => {
                // Over entries, `$` is `{key, value}`, not a place in the
                // document: the maps are kept whole.
                let mut whole = *entries;
                deny_paths(checks, &mut |path, _| {
                    whole |= matches!(path.root(), Root::Binding(_));
                });
                project_for_each(path, element, whole, projections, |element, projections| {
                    project_checks(checks, element, projections);
                });
            }
        }
    }
}

/// Adds what a `forEach` over `path` reads: with a plain path, every
/// element (their number decides how often `inner` runs) and what `inner`
/// adds below each; otherwise, or when asked to keep the elements `whole`
/// (a bound name read inside, entries iterated), all below the path, with
/// `inner` adding only what lies elsewhere.
fn project_for_each(
    path: &JsonPath,
    element: Option<&Place>,
    whole: bool,
    projections: &mut ObjectProjections,
    inner: impl FnOnce(Option<&Place>, &mut ObjectProjections),
) {
    match Place::of(path, &[], &[], element) {
        Placed::At(place) if place.is_exact() && !whole => {
            projections.add_shape(&place);
            inner(Some(&place), projections);
        }
        _ => {
            projections.add_path_within(path, &[], &[], element);
            inner(None, projections);
        }
    }
}

/// Adds what `edits` can read to `projections`. Within a `forEach` whose
/// path leads plainly to its elements (`element`), an element keeps only
/// what the edits read of it: a container's `resources`, not its `env`,
/// `ports` and probes. A `forEach` whose path cannot be followed so keeps
/// its elements whole ([`project_for_each`]).
fn project_edits(
    edits: &[GuardedEdit],
    element: Option<&Place>,
    projections: &mut ObjectProjections,
) {
    for guarded in edits {
        for predicate in &guarded.when {
            predicate
                .for_each_path(&mut |path| projections.add_path_within(path, &[], &[], element));
        }
        match &guarded.edit {
            Edit::SetIfAbsent { target, source } | Edit::Set { target, source } => {
                projections.add_path_within(&target.prefix, &target.tail, &[], element);
                if let Source::Path(path) = source {
                    projections.add_path_within(path, &[], &[], element);
                }
            }
            Edit::MergeIfAbsent { target, .. } => {
                projections.add_path_within(&target.prefix, &target.tail, &[], element);
            }
            Edit::InjectIfMissing { target, keys, .. } => {
                // The list (its length), and each element's key fields:
                // what tells whether the element is there already.
                for key in keys {
                    let more = [Step::Wildcard, Step::Key(Arc::from(key.as_str()))];
                    projections.add_path_within(&target.prefix, &target.tail, &more, element);
                }
            }
            Edit::ForEach { path, edits } => {
                let mut whole = false;
                edit_paths(edits, &mut |path, _| {
                    whole |= matches!(path.root(), Root::Binding(_));
                });
                project_for_each(path, element, whole, projections, |element, projections| {
                    project_edits(edits, element, projections);
                });
            }
        }
    }
}

/// Whether a predicate of `checks` can fail ([`CompiledRule::can_fail`]).
fn checks_can_fail(checks: &[DenyCheck]) -> bool {
    checks.iter().any(|check| match check {
        DenyCheck::Entry { predicate, .. } => predicate.as_ref().is_some_and(Predicate::can_fail),
        DenyCheck::ForEach { checks, .. } => checks_can_fail(checks),
    })
}

fn deny_paths(checks: &[DenyCheck], f: &mut impl FnMut(&JsonPath, &[Token])) {
    for check in checks {
        match check {
            DenyCheck::Entry {
                predicate,
                message,
                message_expression,
            } => {
                if let Some(predicate) = predicate {
                    predicate.for_each_path(&mut |path| f(path, &[]));
                }
                message.paths().for_each(|path| f(path, &[]));
                if let Some(check) = message_expression {
                    check.reads.iter().for_each(|path| f(path, &[]));
                }
            }
            DenyCheck::ForEach { path, checks, .. } => {
                f(path, &[]);
                deny_paths(checks, f);
            }
        }
    }
}

fn edit_paths(edits: &[GuardedEdit], f: &mut impl FnMut(&JsonPath, &[Token])) {
    for guarded in edits {
        for predicate in &guarded.when {
            predicate.for_each_path(&mut |path| f(path, &[]));
        }
        match &guarded.edit {
            Edit::SetIfAbsent { target, source } | Edit::Set { target, source } => {
                f(&target.prefix, &target.tail);
                if let Source::Path(path) = source {
                    f(path, &[]);
                }
            }
            Edit::MergeIfAbsent { target, .. } | Edit::InjectIfMissing { target, .. } => {
                f(&target.prefix, &target.tail);
            }
            Edit::ForEach { path, edits } => {
                f(path, &[]);
                edit_paths(edits, f);
            }
        }
    }
}

/// A compiled condition.
#[derive(Debug)]
pub enum Predicate {
    /// One test on the values a path selects.
    Test {
        /// The path.
        path: JsonPath,
        /// Compare this part of an image reference instead of the whole value.
        image: Option<ImagePart>,
        /// The test.
        test: Test,
    },
    /// At least one holds.
    Any(Vec<Predicate>),
    /// All hold.
    All(Vec<Predicate>),
    /// Does not hold.
    Not(Box<Predicate>),
    /// A CEL expression yields `true`.
    Cel(CelCheck),
}

/// A compiled CEL expression, where it was written, and the documents it
/// reads (each as the path of its root, since an expression may read
/// anything below it).
#[derive(Debug)]
pub struct CelCheck {
    /// The expression.
    pub expression: crate::cel::Expression,
    /// `file:line:col` of the expression, for errors.
    pub at: Arc<str>,
    /// `$.object`, `$.request`, `$`, ... for each variable it reads.
    pub reads: Vec<JsonPath>,
    /// Set when it is one of a rule set's `matchConditions`, which are
    /// evaluated together as the API server evaluates them.
    pub match_condition: Option<MatchConditionOf>,
}

/// Which rule set's `matchConditions` a [`CelCheck`] is one of, and what a
/// failure of one does: the API server skips the webhook when any of them
/// is false, whatever failed; otherwise a failure rejects the request under
/// `failurePolicy: Fail` and skips the webhook under `Ignore`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatchConditionOf {
    /// The guard's place among the rule's set guards: consecutive checks
    /// with the same value are one set's conditions.
    pub set: usize,
    /// A failure denies: some set the rule is reached through (its own,
    /// or one including it) is under `failurePolicy: Fail`.
    pub fail: bool,
}

impl Predicate {
    /// Whether evaluating it can fail and so deny the review: it holds a
    /// CEL expression other than a match condition whose failure skips.
    pub fn can_fail(&self) -> bool {
        match self {
            Predicate::Test { .. } => false,
            Predicate::Any(list) | Predicate::All(list) => list.iter().any(Predicate::can_fail),
            Predicate::Not(inner) => inner.can_fail(),
            Predicate::Cel(check) => check.match_condition.is_none_or(|of| of.fail),
        }
    }

    /// Calls `f` with every path the predicate can read, operands included.
    pub fn for_each_path<'p>(&'p self, f: &mut impl FnMut(&'p JsonPath)) {
        match self {
            Predicate::Test { path, test, .. } => {
                f(path);
                if let Some(other) = test.operand_path() {
                    f(other);
                }
            }
            Predicate::Any(list) | Predicate::All(list) => {
                list.iter().for_each(|p| p.for_each_path(f));
            }
            Predicate::Not(inner) => inner.for_each_path(f),
            Predicate::Cel(check) => check.reads.iter().for_each(f),
        }
    }
}

/// A test on selected values.
#[derive(Debug)]
pub enum Test {
    /// At least one value is selected.
    Exists,
    /// No value is selected.
    Absent,
    /// A value equals the operand (JSON-typed; numbers by value).
    Equals(Operand),
    /// A value differs from the operand.
    NotEquals(Operand),
    /// A value is one of these.
    In(ValueList),
    /// A value is none of these.
    NotIn(ValueList),
    /// A string value contains a match.
    Matches(Pattern),
    /// A string value contains no match.
    NotMatches(Pattern),
    /// A string value starts with one of these.
    StartsWith(Vec<String>),
    /// A string value starts with none of these.
    NotStartsWith(Vec<String>),
    /// A number or quantity compares so to the operand.
    Compare(Comparison, QuantityOperand),
    /// A list holds the operand.
    Contains(Operand),
    /// A list holds one of the operand's elements.
    ContainsAny(ListOperand),
    /// Every element of a list is one of the operand's elements.
    SubsetOf(ListOperand),
}

impl Test {
    /// The path the test compares with, when its operand is one.
    pub fn operand_path(&self) -> Option<&JsonPath> {
        match self {
            Test::Equals(Operand::Path(other))
            | Test::NotEquals(Operand::Path(other))
            | Test::Contains(Operand::Path(other))
            | Test::ContainsAny(ListOperand::Path(other))
            | Test::SubsetOf(ListOperand::Path(other))
            | Test::Compare(_, QuantityOperand::Path(other)) => Some(other),
            _ => None,
        }
    }
}

/// A comparison of quantities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    /// `>`
    Greater,
    /// `>=`
    GreaterOrEqual,
    /// `<`
    Less,
    /// `<=`
    LessOrEqual,
}

/// The right-hand side of a test: a literal or the first value at a path.
#[derive(Debug)]
pub enum Operand {
    /// A literal.
    Value(Value),
    /// The first value at a path.
    Path(JsonPath),
}

/// The right-hand side of a list test (`containsAny`, `subsetOf`).
#[derive(Debug)]
pub enum ListOperand {
    /// A literal list, indexed when the plan is compiled.
    List(ValueList),
    /// The first value at a path (an absent list is empty; a scalar a list
    /// of itself).
    Path(JsonPath),
}

/// The right-hand side of a comparison.
#[derive(Debug)]
pub enum QuantityOperand {
    /// A literal quantity.
    Value(Quantity),
    /// The quantity at a path.
    Path(JsonPath),
}

/// A compiled deny entry.
#[derive(Debug)]
pub enum DenyCheck {
    /// A violation whenever the predicate holds (always, without one).
    Entry {
        /// The condition.
        predicate: Option<Predicate>,
        /// The message template.
        message: Template,
        /// A CEL expression that yields the message, tried first.
        message_expression: Option<Box<CelCheck>>,
    },
    /// Checks run once per selected element.
    ForEach {
        /// The elements.
        path: JsonPath,
        /// Checks per element.
        checks: Vec<DenyCheck>,
        /// Iterate the entries of each selected map, each as
        /// `{key: K, value: V}`, instead of the selected values.
        entries: bool,
        /// For a rule's own `forEach` (not nested, not over entries) on a
        /// document path: its number among the plan's distinct such paths
        /// (same root and text), numbered from 0 up to
        /// [`Plan::shared_selections`], so that one validation walks each
        /// once for all the rules (the Pod Security rules all walk the
        /// same container lists).
        shared: Option<usize>,
    },
}

/// A mutation with its guard.
#[derive(Debug)]
pub struct GuardedEdit {
    /// Conditions that must all hold.
    pub when: Vec<Predicate>,
    /// The mutation.
    pub edit: Edit,
}

/// Where a mutation writes: the matches of `prefix`, then `tail` (created
/// when missing).
#[derive(Debug)]
pub struct WritePath {
    /// Up to the last wildcard or filter; its root is writable.
    pub prefix: JsonPath,
    /// Trailing keys and indices.
    pub tail: Vec<Token>,
}

/// Where a written value comes from.
#[derive(Debug)]
pub enum Source {
    /// A literal.
    Value(Value),
    /// The first value at a path; nothing is written when there is none.
    Path(JsonPath),
}

/// A compiled mutation.
#[derive(Debug)]
pub enum Edit {
    /// Write where nothing is.
    SetIfAbsent {
        /// Target.
        target: WritePath,
        /// Value.
        source: Source,
    },
    /// Write, replacing a different value.
    Set {
        /// Target.
        target: WritePath,
        /// Value.
        source: Source,
    },
    /// Deep-merge, existing values winning.
    MergeIfAbsent {
        /// Target.
        target: WritePath,
        /// The map to merge.
        value: Value,
    },
    /// Append unless an element with the same key exists.
    InjectIfMissing {
        /// The list.
        target: WritePath,
        /// Key fields.
        keys: Vec<String>,
        /// The element.
        value: Value,
    },
    /// Mutations applied per element.
    ForEach {
        /// The elements; its root is writable.
        path: JsonPath,
        /// Mutations with element-relative paths.
        edits: Vec<GuardedEdit>,
    },
}

/// The JSON pointer tokens, within the object, of the pod spec of `kind`.
///
/// Built once for the process: every `/mutate` review of a pod-bearing kind
/// uses one as the base of its `$.podSpec` locations.
pub fn pod_spec_location(kind: &str) -> Option<&'static [Token]> {
    pod_spec_place(kind).and_then(pod_spec_location_at)
}

/// How many places a pod spec can sit at ([`pod_spec_location_at`]).
pub(crate) const POD_SPEC_PLACES: usize = 4;

/// The place (`0..POD_SPEC_PLACES`) of the pod spec of `kind`, if it has one.
pub(crate) fn pod_spec_place(kind: &str) -> Option<usize> {
    match kind {
        "Pod" => Some(0),
        "Deployment"
        | "StatefulSet"
        | "DaemonSet"
        | "ReplicaSet"
        | "ReplicationController"
        | "Job" => Some(1),
        "CronJob" => Some(2),
        "PodTemplate" => Some(3),
        _ => None,
    }
}

/// The tokens of pod spec place `place` ([`pod_spec_place`]).
pub(crate) fn pod_spec_location_at(place: usize) -> Option<&'static [Token]> {
    static LOCATIONS: LazyLock<[Vec<Token>; POD_SPEC_PLACES]> = LazyLock::new(|| {
        let tokens = |keys: &[&str]| keys.iter().map(|key| Token::Key(Arc::from(*key))).collect();
        [
            tokens(&["spec"]),
            tokens(&["spec", "template", "spec"]),
            tokens(&["spec", "jobTemplate", "spec", "template", "spec"]),
            tokens(&["template", "spec"]),
        ]
    });
    LOCATIONS.get(place).map(Vec::as_slice)
}

/// A rule set named `t` whose `spec.rules` are `rules` (list items indented
/// four spaces), as a rule file's text.
#[cfg(test)]
pub(crate) fn test_rule_set(rules: &str) -> String {
    format!(
        "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata:\n  name: t\nspec:\n  rules:\n{rules}"
    )
}

/// [`test_rule_set`] compiled; panics with the diagnostics when it does not.
#[cfg(test)]
pub(crate) fn test_plan(rules: &str) -> Plan {
    compile(&crate::rules::load_str("t.yaml", &test_rule_set(rules)))
        .unwrap_or_else(|d| panic!("{d}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plan of `count` rule sets `s{i}`, each with one Pod rule reading
    /// `spec.f{i}`.
    fn sets_reading_fields(count: usize) -> Plan {
        let sets: String = (0..count)
            .map(|i| {
                format!(
                    "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata: {{name: s{i}}}\n\
                     spec:\n  rules:\n    - name: r\n      match: {{resources: [pods]}}\n      \
                     deny: [{{path: $.object.spec.f{i}, exists: true, message: m}}]\n---\n"
                )
            })
            .collect();
        compile(&crate::rules::load_str("sets.yaml", &sets)).expect("compiles")
    }

    #[test]
    fn a_group_asked_for_by_many_threads_at_once_is_kept_once() {
        let plan = sets_reading_fields(3);
        let group = [RuleSetId(0), RuleSetId(2)];
        let start = std::sync::Barrier::new(8);
        let reads: Vec<bool> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..8)
                .map(|_| {
                    scope.spawn(|| {
                        start.wait();
                        let built = plan.projections_of(Mode::Validate, RuleSets::Several(&group));
                        matches!(built, ModeProjections::Group(..))
                            && built
                                .of_kind("Pod")
                                .object
                                .member("spec")
                                .is_some_and(|spec| {
                                    spec.member("f0").is_some()
                                        && spec.member("f1").is_none()
                                        && spec.member("f2").is_some()
                                })
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|worker| worker.join().unwrap_or(false))
                .collect()
        });
        assert_eq!(reads, [true; 8]);
        assert_eq!(plan.group_projections.load().len(), 1);
    }

    #[test]
    fn group_projections_are_built_once_each_and_bounded_in_number() {
        let plan = sets_reading_fields(8);
        let ids: Vec<RuleSetId> = (0..8).map(RuleSetId).collect();
        let spec = |projections: &ModeProjections<'_>| {
            let spec = projections.of_kind("Pod").object.member("spec");
            (0..8)
                .filter(|i| spec.is_some_and(|spec| spec.member(&format!("f{i}")).is_some()))
                .collect::<Vec<_>>()
        };
        // One set, and a group: only what their rules read.
        assert_eq!(
            spec(&plan.projections_of(Mode::Validate, RuleSets::One(ids[3]))),
            [3]
        );
        let group = [ids[1], ids[5]];
        let built = plan.projections_of(Mode::Validate, RuleSets::Several(&group));
        assert!(matches!(built, ModeProjections::Group(..)));
        assert_eq!(spec(&built), [1, 5]);
        // Each group once: asked again, the same one.
        plan.projections_of(Mode::Mutate, RuleSets::Several(&group));
        let built_groups = || Some(plan.group_projections.load().len());
        assert_eq!(built_groups(), Some(1));
        // Past the bound, the plan's own: what every rule reads.
        for n in 0..=MAX_GROUP_PROJECTIONS {
            let group: Vec<RuleSetId> = ids
                .iter()
                .copied()
                .filter(|id| (n >> id.0) & 1 == 1)
                .collect();
            plan.projections_of(Mode::Validate, RuleSets::Several(&group));
        }
        assert_eq!(built_groups(), Some(MAX_GROUP_PROJECTIONS));
        let past: Vec<RuleSetId> = ids
            .iter()
            .copied()
            .filter(|id| (200 >> id.0) & 1 == 1)
            .collect();
        let whole = plan.projections_of(Mode::Validate, RuleSets::Several(&past));
        assert!(matches!(whole, ModeProjections::Plan(_)));
        assert_eq!(spec(&whole), (0..8).collect::<Vec<_>>());
    }

    /// What `plan` keeps of a Pod's `spec` in `mode`.
    fn pod_spec(plan: &Plan, mode: Mode) -> &Projection {
        plan.projections(mode, "Pod")
            .object
            .member("spec")
            .expect("spec")
    }

    #[test]
    fn a_for_each_element_keeps_what_its_edits_read_and_an_injection_its_keys() {
        let plan = test_plan(
            "    - name: r\n      match: {resources: [pods]}\n      mutate:\n        - forEach: $.podSpec.containers[*]\n          mutate:\n            - setIfAbsent: {path: $.resources.requests.cpu, valueFrom: {path: $.resources.limits.cpu}}\n        - injectIfMissing: {path: $.podSpec.initContainers, key: name, value: {name: i}}\n",
        );
        let spec = pod_spec(&plan, Mode::Mutate);
        let container = spec.member("containers").expect("containers").element();
        let resources = container.member("resources").expect("resources");
        assert!(
            resources
                .member("limits")
                .expect("limits")
                .member("cpu")
                .is_some()
        );
        for unread in ["image", "env", "ports", "name"] {
            assert!(container.member(unread).is_none(), "{unread}");
        }
        let init = spec
            .member("initContainers")
            .expect("initContainers")
            .element();
        assert!(init.member("name").expect("name").is_whole());
        assert!(init.member("image").is_none());
    }

    #[test]
    fn a_validating_for_each_element_keeps_what_its_checks_and_messages_read() {
        let plan = test_plan(
            "    - name: r\n      match: {resources: [pods]}\n      deny:\n        - forEach: $.podSpec.containers[*]\n          deny:\n            - {path: $.securityContext.privileged, equals: true, message: '{{ $.name }}'}\n        - forEach: $.podSpec.volumes[*]\n          deny:\n            - forEach: $.emptyDir\n              entries: true\n              deny:\n                - {path: $.key, equals: medium, message: m}\n",
        );
        let spec = pod_spec(&plan, Mode::Validate);
        let container = spec.member("containers").expect("containers").element();
        assert!(container.member("name").expect("name").is_whole());
        let context = container
            .member("securityContext")
            .expect("securityContext");
        assert!(context.member("privileged").is_some());
        assert!(context.member("runAsUser").is_none());
        assert!(container.member("image").is_none());
        // Over entries `$.key` is no member: the maps iterated stay whole.
        let volume = spec.member("volumes").expect("volumes").element();
        assert!(volume.member("emptyDir").expect("emptyDir").is_whole());
        assert!(volume.member("hostPath").is_none());
    }

    #[test]
    fn plan_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Plan>();
    }

    #[test]
    fn a_plan_names_the_resources_its_rules_name_and_not_through_wildcards() {
        let plan = test_plan(
            "    - name: d\n      match: {resources: [deployments, pods/exec], operations: [UPDATE]}\n      deny: [{message: m}]\n    - name: all\n      match: {resources: ['*']}\n      deny: [{message: m}]\n",
        );
        let request = |group: &str, resource: &str, sub: &str| {
            let body = serde_json::json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": "u",
                    "kind": {"group": group, "version": "v1", "kind": "K"},
                    "resource": {"group": group, "version": "v1", "resource": resource},
                    "subResource": sub,
                    "operation": "CREATE",
                    "userInfo": {"username": "u"}
                }
            });
            crate::review::decode(&serde_json::to_vec(&body).unwrap())
                .unwrap()
                .request
        };
        assert!(plan.names_resource(&request("apps", "deployments", "")));
        assert!(plan.names_resource(&request("", "pods", "exec")));
        assert!(!plan.names_resource(&request("", "pods", "")));
        assert!(!plan.names_resource(&request("", "made-up", "")));
    }

    fn reads_managed_fields(rule: &str) -> bool {
        test_plan(&format!(
            "    - name: r\n      match: {{resources: [pods]}}\n{rule}"
        ))
        .reads_managed_fields()
    }

    #[test]
    fn only_rules_that_can_reach_managed_fields_need_them() {
        let reaching = [
            // The field itself, an ancestor read whole, a wildcard over it.
            "      deny: [{path: \"$.object.metadata.managedFields[0].manager\", exists: true, message: m}]",
            "      deny: [{path: $.oldObject.metadata, equals: {}, message: m}]",
            "      deny: [{path: \"$.object.*\", exists: true, message: m}]",
            "      deny: [{message: \"{{ $.object.metadata }}\"}]",
            "      when: [{path: \"$.object.metadata['labels','managedFields']\", exists: true}]\n      deny: [{message: m}]",
            // A path jsonpath-rust evaluates could reach anything.
            "      deny: [{path: $.object..manager, exists: true, message: m}]",
            "      deny: [{forEach: \"$.object.metadata.*\", deny: [{path: $.x, exists: true, message: m}]}]",
            "      mutate: [{mergeIfAbsent: {path: $.object.metadata, value: {labels: {a: b}}}}]",
            "      mutate: [{setIfAbsent: {path: $.object.metadata.managedFields, value: []}}]",
        ];
        for rule in reaching {
            assert!(reads_managed_fields(rule), "{rule}");
        }
        let not_reaching = [
            "      deny: [{path: $.object.metadata.labels.team, exists: true, message: m}]",
            "      deny: [{path: $.podSpec.containers, exists: true, message: \"{{ $.object.metadata.name }}\"}]",
            "      mutate: [{setIfAbsent: {path: $.object.metadata.annotations.a, valueFrom: {path: $.object.metadata.name}}}]",
            "      mutate: [{forEach: \"$.object.metadata.labels.*\", mutate: [{setIfAbsent: {path: $.x, value: 1}}]}]",
            "      deny: [{path: $.request.userInfo.username, exists: true, message: m}]",
        ];
        for rule in not_reaching {
            assert!(!reads_managed_fields(rule), "{rule}");
        }
    }

    /// Whether the one rule of a set, with `policy` and `matchConditions`
    /// (none when empty) and the rule's `warn` condition, can fail.
    fn warning_rule_can_fail(policy: &str, match_condition: &str, condition: &str) -> bool {
        let conditions = if match_condition.is_empty() {
            String::new()
        } else {
            format!("  matchConditions: [{{name: c, expression: {match_condition:?}}}]\n")
        };
        let set = format!(
            "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata: {{name: s}}\n\
             spec:\n  failurePolicy: {policy}\n{conditions}  rules:\n    - name: r\n      \
             match: {{resources: [pods]}}\n      action: Warn\n      \
             deny: [{{{condition}, message: m}}]\n"
        );
        let plan = compile(&crate::rules::load_str("s.yaml", &set)).expect("compiles");
        plan.rules().iter().any(CompiledRule::can_fail)
    }

    #[test]
    fn only_cel_whose_failure_denies_makes_a_rule_able_to_fail() {
        let path = "path: $.object.spec.hostNetwork, equals: true";
        let cel = "cel: 'object.spec.hostNetwork'";
        let guard = "object.metadata.labels['team'] == 'a'";
        // Paths never fail.
        assert!(!warning_rule_can_fail("Fail", "", path));
        // An expression in a check denies when it fails, whatever the action.
        assert!(warning_rule_can_fail("Fail", "", cel));
        assert!(warning_rule_can_fail("Ignore", "", cel));
        // A match condition that fails denies under Fail and skips under Ignore.
        assert!(warning_rule_can_fail("Fail", guard, path));
        assert!(!warning_rule_can_fail("Ignore", guard, path));
    }
}
