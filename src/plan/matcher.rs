//! Request-level match criteria of a rule, compiled: operations, resources,
//! namespaces, users, groups and the object selector.

use std::borrow::Cow;
use std::fmt;

use serde_json::Value;

use super::patterns::Pattern;
use crate::review::{Operation, Request};
use crate::rules::{LabelSelector, Scope, SelectorOperator};

/// A glob (`*` any run, `?` one character), compiled to the cheapest test.
#[derive(Debug, Clone)]
pub enum Glob {
    /// The whole string.
    Exact(String),
    /// `prefix*`.
    Prefix(String),
    /// `*suffix`.
    Suffix(String),
    /// `*`.
    Any,
    /// Anything else, as an anchored regex (shared with every other use
    /// of the same pattern, and so are its match caches). Its matches are
    /// charged ([`Pattern::match_steps`]): the text is the request's
    /// namespace, username or a group, as long as the body allows.
    Pattern(Pattern),
}

/// Takes the evaluation steps a glob's match costs before it runs; false
/// once the review's budget is spent (see [`Matcher::match_request`]).
pub type Charge<'c> = &'c mut dyn FnMut(u64) -> bool;

impl Glob {
    /// Compiles a glob, making the regex of one that needs a regex with
    /// `regex`; `None` for an empty glob.
    pub fn compile_with<E>(
        glob: &str,
        regex: impl FnOnce(&str) -> Result<Pattern, E>,
    ) -> Option<Result<Glob, E>> {
        if glob.is_empty() {
            return None;
        }
        if glob == "*" {
            return Some(Ok(Glob::Any));
        }
        let special = |c: char| c == '*' || c == '?';
        if !glob.contains(special) {
            Some(Ok(Glob::Exact(glob.to_owned())))
        } else if let Some(inner) = glob.strip_suffix('*')
            && !inner.contains(special)
        {
            Some(Ok(Glob::Prefix(inner.to_owned())))
        } else if let Some(inner) = glob.strip_prefix('*')
            && !inner.contains(special)
        {
            Some(Ok(Glob::Suffix(inner.to_owned())))
        } else {
            let mut pattern = String::from("^");
            for c in glob.chars() {
                match c {
                    '*' => pattern.push_str(".*"),
                    '?' => pattern.push('.'),
                    other => pattern.push_str(&regex::escape(other.encode_utf8(&mut [0; 4]))),
                }
            }
            pattern.push('$');
            Some(regex(&pattern).map(Glob::Pattern))
        }
    }

    /// True when `text` matches; `Err` when `charge` refuses the steps a
    /// regex match costs, which is then not run. The other globs cost no
    /// more than their own length and are not charged.
    pub fn is_match(&self, text: &str, charge: Charge<'_>) -> Result<bool, OverBudget> {
        Ok(match self {
            Glob::Exact(exact) => text == exact,
            Glob::Prefix(prefix) => text.starts_with(prefix.as_str()),
            Glob::Suffix(suffix) => text.ends_with(suffix.as_str()),
            Glob::Any => true,
            Glob::Pattern(pattern) => pattern.is_match_charged(text, |steps| {
                if charge(steps) {
                    Ok(())
                } else {
                    Err(OverBudget)
                }
            })?,
        })
    }
}

/// The evaluation budget ran out while globs were matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverBudget;

/// Whether any of `texts` matches any of `globs`.
fn any_match<'t>(
    globs: &[Glob],
    texts: impl IntoIterator<Item = &'t str>,
    charge: Charge<'_>,
) -> Result<bool, OverBudget> {
    if globs.is_empty() {
        return Ok(false);
    }
    for text in texts {
        for glob in globs {
            if glob.is_match(text, charge)? {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// A compiled label selector.
#[derive(Debug, Clone, Default)]
pub struct LabelMatcher {
    selector: LabelSelector,
}

impl LabelMatcher {
    /// Wraps a checked selector.
    pub fn new(selector: LabelSelector) -> Self {
        LabelMatcher { selector }
    }

    /// The selector.
    pub fn selector(&self) -> &LabelSelector {
        &self.selector
    }

    /// The label keys the selector looks at.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        let labels = self.selector.match_labels.keys().map(String::as_str);
        let expressions = self
            .selector
            .match_expressions
            .iter()
            .map(|req| req.key.as_str());
        labels.chain(expressions)
    }

    /// True when `object`'s labels satisfy the selector. An empty selector
    /// (`objectSelector: {}`) matches anything, as the API server's does,
    /// even an object without metadata; otherwise a null object (or one
    /// without metadata, such as PodExecOptions) never matches.
    pub fn matches(&self, object: &Value) -> bool {
        if self.selector.match_labels.is_empty() && self.selector.match_expressions.is_empty() {
            return true;
        }
        let Some(metadata) = object.get("metadata").and_then(Value::as_object) else {
            return false;
        };
        let labels = metadata.get("labels").and_then(Value::as_object);
        let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        let labels_ok = self
            .selector
            .match_labels
            .iter()
            .all(|(key, value)| label(key) == Some(value.as_str()));
        labels_ok
            && self.selector.match_expressions.iter().all(|req| {
                let value = label(&req.key);
                match req.operator {
                    SelectorOperator::In => {
                        value.is_some_and(|v| req.values.iter().any(|x| x == v))
                    }
                    SelectorOperator::NotIn => {
                        value.is_none_or(|v| !req.values.iter().any(|x| x == v))
                    }
                    SelectorOperator::Exists => value.is_some(),
                    SelectorOperator::DoesNotExist => value.is_none(),
                }
            })
    }
}

/// One resource rule in matchable form.
#[derive(Debug, Clone)]
pub struct ResourceMatch {
    /// API groups (`*` any).
    pub groups: Vec<String>,
    /// API versions (`*` any).
    pub versions: Vec<String>,
    /// `(resource, subresource)` pairs; `*` on either side, `""` for none.
    pub resources: Vec<(String, String)>,
    /// Scope.
    pub scope: Scope,
}

/// String equality that does not call `memcmp` for two empty strings.
///
/// The core API group and "no subresource" are both `""`, so nearly every
/// request compares empty strings here. Rust calls `memcmp` with length 0 for
/// them, and glibc's AVX-512 `memcmp` took about 90 ns for that on the
/// machines we measured (2 ns for short non-empty strings): 170 ns per
/// candidate rule before this check.
/// `a == b`, without calling `memcmp` for two empty strings: both point at
/// the same dangling address, and glibc's AVX-512 `memcmp` takes about
/// 100 ns to load from it under an empty mask (docs/benchmarks.md, "The
/// empty-string `memcmp` trap"). The core group and "no subresource" are
/// empty in most requests.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && (a.is_empty() || a == b)
}

impl ResourceMatch {
    fn matches(&self, key: &RequestKey<'_>) -> bool {
        let is = |list: &[String], value: &str| list.iter().any(|x| x == "*" || same(x, value));
        is(&self.groups, &key.group)
            && is(&self.versions, &key.version)
            && self.resources.iter().any(|(name, sub_pattern)| {
                (name == "*" || same(name, &key.resource))
                    && (sub_pattern == "*" || same(sub_pattern, &key.sub_resource))
            })
            && match self.scope {
                Scope::All => true,
                Scope::Cluster => key.is_cluster_scoped(),
                Scope::Namespaced => !key.is_cluster_scoped(),
            }
    }
}

/// Request-level match criteria.
#[derive(Debug, Clone, Default)]
pub struct Matcher {
    /// Indexed by [`Operation::index`].
    pub operations: [bool; 4],
    /// Resource rules; one must match.
    pub resources: Vec<ResourceMatch>,
    /// Namespace globs; one must match when non-empty.
    pub namespaces: Vec<Glob>,
    /// Namespace globs that exclude.
    pub exclude_namespaces: Vec<Glob>,
    /// User globs; one must match when non-empty.
    pub users: Vec<Glob>,
    /// User globs that exclude.
    pub exclude_users: Vec<Glob>,
    /// Group globs; one group must match one when non-empty.
    pub groups: Vec<Glob>,
    /// Group globs that exclude.
    pub exclude_groups: Vec<Glob>,
    /// Object selector.
    pub object_selector: Option<LabelMatcher>,
}

/// Why a rule did not match a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// The operation is not one the rule lists.
    Operation,
    /// No resource pattern matches.
    Resource,
    /// The namespace is not among `namespaces`.
    Namespace,
    /// The namespace is excluded.
    ExcludedNamespace,
    /// The user is not among `users`.
    User,
    /// The user is excluded.
    ExcludedUser,
    /// No group is among `groups`.
    Group,
    /// A group is excluded.
    ExcludedGroup,
    /// Neither the object nor the old object matches the selector.
    ObjectSelector,
    /// The `when` condition with this index does not hold.
    When(usize),
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::Operation => f.write_str("operation not matched"),
            Mismatch::Resource => f.write_str("resource not matched"),
            Mismatch::Namespace => f.write_str("namespace not in match.namespaces"),
            Mismatch::ExcludedNamespace => {
                f.write_str("namespace excluded by match.excludeNamespaces")
            }
            Mismatch::User => f.write_str("user not in match.users"),
            Mismatch::ExcludedUser => f.write_str("user excluded by match.excludeUsers"),
            Mismatch::Group => f.write_str("no group in match.groups"),
            Mismatch::ExcludedGroup => f.write_str("a group is excluded by match.excludeGroups"),
            Mismatch::ObjectSelector => {
                f.write_str("object labels do not match match.objectSelector")
            }
            Mismatch::When(i) => write!(f, "when[{i}] does not hold"),
        }
    }
}

/// All that [`Matcher::match_request`] and the plan's index can read of a
/// request: they take this, not the request, so two requests with the same
/// key always leave the same rules standing, and `kadmit audit` may keep a
/// selection for as long as the key stays the same. Borrowed from the
/// request ([`RequestKey::of`]) on the webhook path; owned
/// ([`RequestKey::into_owned`]) where it is kept.
#[derive(Debug, Clone)]
pub struct RequestKey<'a> {
    operation: Operation,
    group: Cow<'a, str>,
    version: Cow<'a, str>,
    resource: Cow<'a, str>,
    sub_resource: Cow<'a, str>,
    namespace: Option<Cow<'a, str>>,
    username: Cow<'a, str>,
    groups: Cow<'a, [String]>,
}

impl PartialEq for RequestKey<'_> {
    fn eq(&self, other: &Self) -> bool {
        // Taken apart whole, so that a field added to the key cannot be
        // left out of the comparison.
        let RequestKey {
            operation,
            group,
            version,
            resource,
            sub_resource,
            namespace,
            username,
            groups,
        } = self;
        *operation == other.operation
            && same(group, &other.group)
            && same(version, &other.version)
            && same(resource, &other.resource)
            && same(sub_resource, &other.sub_resource)
            && match (namespace, &other.namespace) {
                (Some(a), Some(b)) => same(a, b),
                (None, None) => true,
                _ => false,
            }
            && same(username, &other.username)
            && groups.len() == other.groups.len()
            && groups
                .iter()
                .zip(other.groups.iter())
                .all(|(a, b)| same(a, b))
    }
}

impl Eq for RequestKey<'_> {}

impl<'a> RequestKey<'a> {
    /// The key of `request`, borrowing its fields.
    pub fn of(request: &'a Request) -> Self {
        RequestKey {
            operation: request.operation,
            group: Cow::Borrowed(&request.resource.group),
            version: Cow::Borrowed(&request.resource.version),
            resource: Cow::Borrowed(&request.resource.resource),
            sub_resource: Cow::Borrowed(request.sub_resource()),
            namespace: request.namespace.as_deref().map(Cow::Borrowed),
            username: Cow::Borrowed(&request.user_info.username),
            groups: Cow::Borrowed(&request.user_info.groups),
        }
    }

    /// The same key, owning its fields, to keep beyond the request.
    pub fn into_owned(self) -> RequestKey<'static> {
        RequestKey {
            operation: self.operation,
            group: Cow::Owned(self.group.into_owned()),
            version: Cow::Owned(self.version.into_owned()),
            resource: Cow::Owned(self.resource.into_owned()),
            sub_resource: Cow::Owned(self.sub_resource.into_owned()),
            namespace: self.namespace.map(|ns| Cow::Owned(ns.into_owned())),
            username: Cow::Owned(self.username.into_owned()),
            groups: Cow::Owned(self.groups.into_owned()),
        }
    }

    /// The operation.
    pub fn operation(&self) -> Operation {
        self.operation
    }

    /// The resource's API group (`""` for the core group).
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The resource, such as `pods`.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The subresource, `""` for none.
    pub fn sub_resource(&self) -> &str {
        &self.sub_resource
    }

    /// Namespaces are cluster-scoped although their reviews carry their own
    /// name as `namespace`.
    fn is_cluster_scoped(&self) -> bool {
        let is_namespace = self.group.is_empty() && self.resource == "namespaces";
        is_namespace || self.namespace.as_deref().unwrap_or("").is_empty()
    }
}

impl Matcher {
    /// Whether the rule names `namespace` among the ones it matches, and
    /// does not exclude it. Unmetered: for checks made once, offline, on a
    /// namespace name (exact, prefix and suffix globs cost nothing, and a
    /// pattern's match on a short name is short).
    pub fn names_namespace(&self, namespace: &str) -> bool {
        let mut free = |_: u64| true;
        let mut any = |globs: &[Glob]| any_match(globs, [namespace], &mut free).unwrap_or(false);
        any(&self.namespaces) && !any(&self.exclude_namespaces)
    }

    /// Checks everything that needs only the request (not the objects).
    ///
    /// Glob regexes are matched against the namespace, the username and
    /// each group, which a client without a certificate may make as long as
    /// the body allows: `charge` takes each match's steps first (a 15 MB
    /// username took 3 s against 100 rules' globs before it did). `Err`
    /// when it refuses them: the rule neither matched nor failed to, and
    /// the review is over its budget.
    pub fn match_request(
        &self,
        key: &RequestKey<'_>,
        charge: Charge<'_>,
    ) -> Result<Result<(), Mismatch>, OverBudget> {
        if !self.operations[key.operation.index()] {
            return Ok(Err(Mismatch::Operation));
        }
        if !self.resources.iter().any(|r| r.matches(key)) {
            return Ok(Err(Mismatch::Resource));
        }
        let namespace = key.namespace.as_deref().filter(|ns| !ns.is_empty());
        if !self.namespaces.is_empty() && !any_match(&self.namespaces, namespace, charge)? {
            return Ok(Err(Mismatch::Namespace));
        }
        if any_match(&self.exclude_namespaces, namespace, charge)? {
            return Ok(Err(Mismatch::ExcludedNamespace));
        }
        let user = Some(&*key.username);
        if !self.users.is_empty() && !any_match(&self.users, user, charge)? {
            return Ok(Err(Mismatch::User));
        }
        if any_match(&self.exclude_users, user, charge)? {
            return Ok(Err(Mismatch::ExcludedUser));
        }
        let groups = || key.groups.iter().map(String::as_str);
        if !self.groups.is_empty() && !any_match(&self.groups, groups(), charge)? {
            return Ok(Err(Mismatch::Group));
        }
        if any_match(&self.exclude_groups, groups(), charge)? {
            return Ok(Err(Mismatch::ExcludedGroup));
        }
        Ok(Ok(()))
    }

    /// True when the operation and the resource match, whatever the
    /// namespace, user and groups (what an in-tree policy's
    /// `matchConstraints` test).
    pub fn match_resource(&self, key: &RequestKey<'_>) -> bool {
        self.operations[key.operation.index()] && self.resources.iter().any(|r| r.matches(key))
    }

    /// Checks the object selector: the object or the old object must match.
    pub fn match_objects(&self, object: &Value, old_object: &Value) -> Result<(), Mismatch> {
        match &self.object_selector {
            Some(selector) if !(selector.matches(object) || selector.matches(old_object)) => {
                Err(Mismatch::ObjectSelector)
            }
            _ => Ok(()),
        }
    }

    /// True when the rule applies to `operation` at all.
    pub fn has_operation(&self, operation: Operation) -> bool {
        self.operations[operation.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::patterns::Regexes;
    use std::collections::BTreeMap;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
    use crate::rules::LabelSelectorRequirement;
    use serde_json::json;

    #[test]
    fn globs() {
        let cases = [
            ("kube-*", "kube-system", true),
            ("kube-*", "default", false),
            ("*-prod", "team-prod", true),
            (
                "system:serviceaccount:*:builder",
                "system:serviceaccount:ci:builder",
                true,
            ),
            (
                "system:serviceaccount:*:builder",
                "system:serviceaccount:ci:other",
                false,
            ),
            ("team-?", "team-a", true),
            ("team-?", "team-ab", false),
            ("a.b", "axb", false),
            ("*", "", true),
            // Globs are text, not bytes: a name may end or start in any
            // character.
            ("é", "é", true),
            ("é", "e", false),
            ("équipe-*", "équipe-a", true),
            ("*-é", "a-é", true),
            ("*é?", "xéy", true),
            ("ü*ö", "üxö", true),
        ];
        let mut regexes = Regexes::default();
        for (glob, text, expected) in cases {
            let Some(Ok(compiled)) = Glob::compile_with(glob, |p| regexes.compile(p)) else {
                panic!("{glob} does not compile");
            };
            assert_eq!(
                compiled.is_match(text, &mut |_| true),
                Ok(expected),
                "{glob} {text}"
            );
        }
        assert!(Glob::compile_with("", |p| regexes.compile(p)).is_none());
    }

    #[test]
    fn a_glob_regex_matches_only_once_charged_and_by_the_length_of_the_text() {
        let mut regexes = Regexes::default();
        let Some(Ok(glob)) = Glob::compile_with("system:*:adm?n", |p| regexes.compile(p)) else {
            panic!("the glob does not compile");
        };
        let text = format!("system:{}:admin", "x".repeat(10_000));
        let mut charged = Vec::new();
        assert_eq!(
            glob.is_match(&text, &mut |steps| {
                charged.push(steps);
                true
            }),
            Ok(true)
        );
        let Glob::Pattern(pattern) = &glob else {
            panic!("an inner * needs a regex");
        };
        assert_eq!(charged, [pattern.match_steps(text.len())]);
        assert!(charged[0] > 10_000, "{charged:?}");
        assert_eq!(glob.is_match(&text, &mut |_| false), Err(OverBudget));
        // The globs a comparison decides are free.
        for plain in ["system:*", "*:admin", "system:admin", "*"] {
            let Some(Ok(glob)) = Glob::compile_with(plain, |p| regexes.compile(p)) else {
                panic!("{plain} does not compile");
            };
            assert!(glob.is_match(&text, &mut |_| false).is_ok(), "{plain}");
        }
    }

    #[test]
    fn a_request_whose_globs_cost_more_than_the_budget_neither_matches_nor_mismatches() {
        let mut regexes = Regexes::default();
        let glob = |text: &str, regexes: &mut Regexes| match Glob::compile_with(text, |p| {
            regexes.compile(p)
        }) {
            Some(Ok(glob)) => glob,
            _ => panic!("{text} does not compile"),
        };
        let matcher = Matcher {
            operations: [true; 4],
            resources: vec![ResourceMatch {
                groups: vec!["*".into()],
                versions: vec!["*".into()],
                resources: vec![("*".into(), "*".into())],
                scope: Scope::All,
            }],
            groups: vec![glob("team-*-admins?", &mut regexes)],
            ..Matcher::default()
        };
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "operation": "CREATE",
                "userInfo": {"username": "u", "groups": ["a", "team-x-admins1"]}
            }
        });
        let mut request = crate::review::decode(body.to_string().as_bytes())
            .unwrap()
            .request;
        let mut spent = 0u64;
        let key = RequestKey::of(&request);
        assert_eq!(
            matcher.match_request(&key, &mut |steps| {
                spent += steps;
                true
            }),
            Ok(Ok(()))
        );
        assert!(spent > 0);
        // Each group is charged until one matches: over the budget, the
        // answer is neither.
        request.user_info.groups = vec!["x".repeat(1_000); 100];
        let key = RequestKey::of(&request);
        let mut left = 50_000u64;
        let mut charge = |steps: u64| match left.checked_sub(steps) {
            Some(rest) => {
                left = rest;
                true
            }
            None => false,
        };
        assert_eq!(matcher.match_request(&key, &mut charge), Err(OverBudget));
    }

    #[test]
    fn a_label_selector_never_matches_objects_without_metadata_unless_it_is_empty() {
        let selector = LabelMatcher::new(LabelSelector {
            match_labels: labels(&[("app", "web")]),
            match_expressions: vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: SelectorOperator::NotIn,
                values: vec!["db".into()],
            }],
        });
        assert!(selector.matches(&json!({"metadata": {"labels": {"app": "web"}}})));
        assert!(!selector.matches(&json!({"metadata": {"labels": {"app": "web", "tier": "db"}}})));
        assert!(!selector.matches(&Value::Null));
        assert!(!selector.matches(&json!({"kind": "PodExecOptions", "command": ["sh"]})));
        // The API server's empty selector matches before it looks at the
        // object: `objectSelector: {}` on CONNECT (PodExecOptions) or a
        // DELETE's null object matched nothing, and the rule never fired.
        let empty = LabelMatcher::default();
        assert!(empty.matches(&json!({"metadata": {}})));
        assert!(empty.matches(&Value::Null));
        assert!(empty.matches(&json!({"kind": "PodExecOptions", "command": ["sh"]})));
    }
}
