//! Webhook configurations for a set of rule files: which requests the API
//! server sends to kadmit, where, and what it does when kadmit cannot answer
//! (`kadmit webhook-config`).
//!
//! The API server filters requests by the webhook configuration before it
//! calls kadmit, so the configuration decides both the load on kadmit and the
//! blast radius of an outage: with `failurePolicy: Fail`, every request the
//! configuration matches is rejected while kadmit is unreachable. The
//! generated configuration is therefore as narrow as the rules allow:
//!
//! - only the kinds of configuration the rules need: no
//!   `MutatingWebhookConfiguration` when no rule mutates;
//! - `rules` are the union of the rules' matches (operations, groups,
//!   versions, resources with subresources, scope), with every entry that a
//!   wider one covers removed, and entries merged only where the merge adds
//!   nothing (`pods` in the core group and `deployments` in `apps` stay two
//!   entries, because one entry would also match `apps/pods`);
//! - a `namespaceSelector` that always excludes `kube-system` and kadmit's own
//!   namespace, so kadmit can never block the pods that would bring it back
//!   (the deadlock the Kubernetes documentation warns about), combined with the
//!   rule set's own `spec.namespaceSelector`;
//! - an `objectSelector` when every rule of the entry shares one.
//!
//! [`generate`] is pure: it takes the compiled rules (the same [`Plan`] the
//! server serves, so what the configuration sends is what the rules match)
//! and [`Options`] and returns [`Configurations`], which print as YAML with
//! [`Configurations::to_yaml`].
//!
//! ```
//! use kadmit::webhook::{generate, Client, Options};
//!
//! let loaded = kadmit::rules::load_str("pods.yaml", "
//! apiVersion: kadmit.dev/v1alpha1
//! kind: RuleSet
//! metadata: {name: pods}
//! spec:
//!   rules:
//!     - name: no-latest
//!       match: {resources: [pods]}
//!       deny:
//!         - path: $.object.spec.containers[*].image
//!           matches: ':latest$'
//!           message: pin the image
//! ");
//! let plan = kadmit::plan::compile(&loaded).unwrap();
//! let options = Options::new(Client::Service("kadmit/kadmit".parse().unwrap()));
//! let configurations = generate(&plan, &options).unwrap();
//! assert!(configurations.mutating.is_none());
//! let validating = configurations.validating.unwrap();
//! let webhooks = validating.webhooks.unwrap_or_default();
//! assert_eq!(webhooks[0].name, "pods.validate.kadmit.dev");
//! ```

mod diff;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition as ApiMatchCondition, MutatingWebhook, MutatingWebhookConfiguration,
    RuleWithOperations, ServiceReference, ValidatingWebhook, ValidatingWebhookConfiguration,
    WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use crate::plan::{CompiledRule, Matcher, Plan, RuleSetInfo};
use crate::review::Operation;
use crate::rules::{
    FailurePolicy, LabelSelector, LabelSelectorRequirement, MatchCondition, OperationPattern,
    Scope, SelectorOperator,
};

pub use diff::{
    Diff, Installed, InstalledEntry, InstalledError, Needless, NotSent, compare, read_installed,
};

/// `apiVersion` of the generated configurations.
pub const API_VERSION: &str = "admissionregistration.k8s.io/v1";
/// `metadata.name` of both generated configurations.
pub const CONFIGURATION_NAME: &str = "kadmit";
/// The domain that webhook entry names end with (`pods.validate.kadmit.dev`).
pub const WEBHOOK_DOMAIN: &str = "kadmit.dev";
/// The namespace kadmit runs in unless told otherwise.
pub const DEFAULT_NAMESPACE: &str = "kadmit";
/// Webhook timeout when a rule set names none.
pub const DEFAULT_TIMEOUT_SECONDS: u32 = 5;
/// The label the API server puts on every namespace, holding its name; the
/// only way a `namespaceSelector` can name namespaces.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";
/// The namespace that is never sent to kadmit, besides kadmit's own.
pub const SYSTEM_NAMESPACE: &str = "kube-system";

/// How to generate the configurations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Where the API server reaches kadmit.
    pub client: Client,
    /// Grouped entries, one entry per rule set, or one catch-all entry.
    pub layout: Layout,
    /// PEM of the CA that signed kadmit's serving certificate. `None` leaves
    /// `caBundle` out, for cert-manager's CA injector to fill in.
    pub ca_bundle_pem: Option<Vec<u8>>,
    /// The namespace kadmit runs in, excluded from every entry.
    pub kadmit_namespace: String,
}

impl Options {
    /// Options with defaults: rule sets grouped ([`Layout::Grouped`]), no CA
    /// bundle, and kadmit's namespace taken from the service (or
    /// [`DEFAULT_NAMESPACE`]).
    pub fn new(client: Client) -> Self {
        let kadmit_namespace = match &client {
            Client::Service(service) => service.namespace.clone(),
            Client::Url(_) => DEFAULT_NAMESPACE.to_owned(),
        };
        Options {
            client,
            layout: Layout::default(),
            ca_bundle_pem: None,
            kadmit_namespace,
        }
    }
}

/// Where the API server sends reviews.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Client {
    /// A Service in the cluster.
    Service(ServiceRef),
    /// An https URL, for kadmit running outside the cluster.
    Url(WebhookUrl),
}

/// How rule sets are spread over webhook entries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Layout {
    /// Rule sets the API server would treat alike share one entry (the
    /// default): the same failure policy, timeout and namespace selector
    /// (and match conditions, which rule sets do not declare), and the same
    /// object selector, or one that widens nothing. The entry's path names
    /// its rule sets (`/validate/images.services`), so kadmit evaluates
    /// exactly those and its metrics still count each rule set. A
    /// request that several rule sets match costs one call instead of one
    /// per rule set. Mutating entries group only rule sets that are next to
    /// each other in rule-set order, so the API server still calls them in
    /// that order.
    #[default]
    Grouped,
    /// One entry per rule set, at `/mutate/{ruleset}` and
    /// `/validate/{ruleset}`: each keeps its own failure policy, timeout,
    /// namespace selector and resources, and its own line in API server
    /// metrics.
    PerRuleSet,
    /// One catch-all entry at `/mutate` and `/validate`: one call per request
    /// instead of one per rule set.
    Single,
}

/// What separates the rule-set names in a grouped entry's path
/// (`/validate/images.services`) and name (`images.services.validate.kadmit.dev`).
///
/// The API server requires every segment of a webhook's `service.path` to
/// be a DNS subdomain, so the separator can only be `.`; rule-set names are
/// DNS labels, which never hold one, so the split is never ambiguous.
pub const RULE_SET_SEPARATOR: char = '.';

/// The longest path segment naming rule sets that kadmit accepts: a DNS
/// subdomain's bound, which the API server enforces on every segment of a
/// `service.path`. It bounds the names too (at most 127).
pub const MAX_RULE_SETS_SEGMENT_BYTES: usize = 253;

/// The path segment naming `names`, as [`rule_set_names`] reads it.
///
/// ```
/// assert_eq!(kadmit::webhook::rule_sets_segment(["images", "services"]), "images.services");
/// ```
pub fn rule_sets_segment<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let mut segment = String::new();
    for name in names {
        if !segment.is_empty() {
            segment.push(RULE_SET_SEPARATOR);
        }
        segment.push_str(name);
    }
    segment
}

/// The rule-set names of a webhook path's last segment (`images.services`),
/// in order. Whether they name loaded rule sets is the caller's to check.
///
/// ```
/// use kadmit::webhook::rule_set_names;
/// assert_eq!(rule_set_names("images.services").unwrap(), ["images", "services"]);
/// assert!(rule_set_names("images..services").is_err());
/// assert!(rule_set_names("images.images").is_err());
/// ```
pub fn rule_set_names(segment: &str) -> Result<Vec<&str>, PathError> {
    if segment.len() > MAX_RULE_SETS_SEGMENT_BYTES {
        return Err(PathError::TooLong {
            bytes: segment.len(),
        });
    }
    let names: Vec<&str> = segment.split(RULE_SET_SEPARATOR).collect();
    for (i, name) in names.iter().enumerate() {
        if name.is_empty() {
            return Err(PathError::EmptyName);
        }
        if names.get(..i).is_some_and(|before| before.contains(name)) {
            return Err(PathError::Repeated((*name).to_owned()));
        }
    }
    Ok(names)
}

/// The rule sets of `plan` a path segment names (`images`, or the several
/// of a grouped entry, `images.services`), in plan order: what the server
/// evaluates for that path, and what a recorded or kept review is
/// evaluated again with.
pub fn rule_set_ids(
    plan: &crate::plan::Plan,
    segment: &str,
) -> Result<Vec<crate::plan::RuleSetId>, RuleSetsError> {
    let names = rule_set_names(segment)?;
    let mut ids = Vec::with_capacity(names.len());
    for name in names {
        let id = plan
            .rule_set_id(name)
            .ok_or_else(|| RuleSetsError::Unknown(name.to_owned()))?;
        ids.push(id);
    }
    ids.sort_by_key(|id| id.0);
    Ok(ids)
}

/// Why a path segment names no rule sets of a plan.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleSetsError {
    /// The segment is not a list of names.
    #[error(transparent)]
    Path(#[from] PathError),
    /// The plan has no rule set of this name.
    #[error("no rule set named {0:?}")]
    Unknown(String),
}

/// A webhook path segment that cannot name rule sets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Longer than [`MAX_RULE_SETS_SEGMENT_BYTES`].
    #[error(
        "the rule-set names take {bytes} bytes, more than the {MAX_RULE_SETS_SEGMENT_BYTES} a webhook path segment may hold"
    )]
    TooLong {
        /// The segment's length.
        bytes: usize,
    },
    /// `a..b`, `.a` or `a.`.
    #[error("an empty rule-set name: names are separated by single '.'")]
    EmptyName,
    /// A name given twice.
    #[error("rule set {0:?} is named twice")]
    Repeated(String),
}

/// A Service reference, `NAMESPACE/NAME[:PORT]`.
///
/// ```
/// let service: kadmit::webhook::ServiceRef = "kadmit/kadmit:8443".parse().unwrap();
/// assert_eq!((service.namespace.as_str(), service.name.as_str(), service.port), ("kadmit", "kadmit", Some(8443)));
/// assert!("kadmit".parse::<kadmit::webhook::ServiceRef>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRef {
    /// Namespace of the Service.
    pub namespace: String,
    /// Name of the Service.
    pub name: String,
    /// Service port; the API server's default is 443.
    pub port: Option<u16>,
}

impl FromStr for ServiceRef {
    type Err = ClientError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = |reason: &str| ClientError::Service {
            value: text.to_owned(),
            reason: reason.to_owned(),
        };
        let (namespace, rest) = text
            .split_once('/')
            .ok_or_else(|| invalid("expected NAMESPACE/NAME[:PORT]"))?;
        let (name, port) = match rest.split_once(':') {
            Some((name, port)) => {
                let port = port
                    .parse::<u16>()
                    .ok()
                    .filter(|port| *port != 0)
                    .ok_or_else(|| invalid("the port is not a number from 1 to 65535"))?;
                (name, Some(port))
            }
            None => (rest, None),
        };
        if !is_dns_label(namespace) {
            return Err(invalid("the namespace is not a DNS label"));
        }
        if !is_dns_label(name) {
            return Err(invalid("the name is not a DNS label"));
        }
        Ok(ServiceRef {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            port,
        })
    }
}

impl fmt::Display for ServiceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)?;
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        Ok(())
    }
}

/// An `https://` URL without query, fragment or user info, as the API server
/// requires; kadmit's paths are appended to it. A trailing `/` is dropped.
///
/// ```
/// let url: kadmit::webhook::WebhookUrl = "https://kadmit.example:8443/".parse().unwrap();
/// assert_eq!(url.as_str(), "https://kadmit.example:8443");
/// assert!("http://kadmit.example".parse::<kadmit::webhook::WebhookUrl>().is_err());
/// // kadmit answers at the root: a path would get every call a 404.
/// assert!("https://kadmit.example/validate".parse::<kadmit::webhook::WebhookUrl>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookUrl(String);

impl WebhookUrl {
    /// The URL, without a trailing `/`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for WebhookUrl {
    type Err = ClientError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = |reason: &str| ClientError::Url {
            value: text.to_owned(),
            reason: reason.to_owned(),
        };
        let rest = text
            .strip_prefix("https://")
            .ok_or_else(|| invalid("the API server only calls https:// URLs"))?;
        if text.contains(['?', '#']) {
            return Err(invalid("the API server forbids a query or fragment"));
        }
        let host = rest.split('/').next().unwrap_or_default();
        if host.contains('@') {
            return Err(invalid("the API server forbids user info"));
        }
        if host.is_empty() || host.starts_with(':') {
            return Err(invalid("the host is missing"));
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(invalid("it contains whitespace"));
        }
        let url = text.trim_end_matches('/');
        if url["https://".len()..].contains('/') {
            return Err(invalid(
                "kadmit serve answers /validate and /mutate at the root, and a path here would                  come before them, so every call would get a 404: give the URL without a path",
            ));
        }
        Ok(WebhookUrl(url.to_owned()))
    }
}

impl fmt::Display for WebhookUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A `--service` or `--url` value that the API server would not accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// A malformed Service reference.
    #[error("invalid service {value:?}: {reason}")]
    Service {
        /// The value given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A URL the API server would reject.
    #[error("invalid webhook URL {value:?}: {reason}")]
    Url {
        /// The value given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Why no configuration could be generated.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// No rule mutates or validates anything: an empty configuration would
    /// only hide the mistake.
    #[error(
        "no rule mutates or validates anything, so the API server has nothing to send to kadmit"
    )]
    NothingToAdmit,
    /// A catch-all entry cannot carry rule sets' different namespace selectors.
    #[error(
        "rule sets {first:?} and {second:?} declare different namespaceSelectors, which one catch-all entry cannot express; generate one entry per rule set"
    )]
    ConflictingNamespaceSelectors {
        /// One rule set.
        first: String,
        /// Another one, whose selector differs.
        second: String,
    },
    /// The CA bundle is not usable.
    #[error("invalid CA bundle: {0}")]
    CaBundle(String),
    /// kadmit's own namespace is not a namespace name.
    #[error("invalid kadmit namespace {0:?}: not a DNS label")]
    Namespace(String),
}

/// The generated configurations; a kind is `None` when no rule needs it.
///
/// The objects are k8s-openapi's types, the ones the Rust Kubernetes
/// ecosystem shares, kept in step with the API; they serialize their fields
/// in alphabetical order (`apiVersion` and `kind` first).
#[derive(Debug, Clone, PartialEq)]
pub struct Configurations {
    /// The `MutatingWebhookConfiguration`, when some rule mutates.
    pub mutating: Option<MutatingWebhookConfiguration>,
    /// The `ValidatingWebhookConfiguration`, when some rule denies, warns or audits.
    pub validating: Option<ValidatingWebhookConfiguration>,
}

impl Configurations {
    /// The configurations as a YAML stream (mutating first, the order the API
    /// server calls them in), ready for `kubectl apply -f -`.
    pub fn to_yaml(&self) -> Result<String, serde_yaml::Error> {
        let mut out = String::from(
            "# Generated by `kadmit webhook-config`: change the rule files and regenerate\n\
             # rather than editing this file.\n",
        );
        if let Some(mutating) = &self.mutating {
            out.push_str("---\n");
            out.push_str(&serde_yaml::to_string(mutating)?);
        }
        if let Some(validating) = &self.validating {
            out.push_str("---\n");
            out.push_str(&serde_yaml::to_string(validating)?);
        }
        Ok(out)
    }
}

/// Which configuration an entry belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Mutating,
    Validating,
}

impl Kind {
    fn verb(self) -> &'static str {
        match self {
            Kind::Mutating => "mutate",
            Kind::Validating => "validate",
        }
    }

    /// Whether `rule` is evaluated at this kind's endpoint.
    fn serves(self, rule: &CompiledRule) -> bool {
        match self {
            Kind::Mutating => !rule.mutations.is_empty(),
            Kind::Validating => !rule.deny.is_empty(),
        }
    }
}

/// Generates the webhook configurations for the rules of `plan`.
///
/// The rules that name, among the namespaces they match, one every entry
/// excludes (`kube-system`, kadmit's own): the API server never sends kadmit
/// a request there, so that part of the rule never fires, though
/// `kadmit test` (which knows nothing of the cluster) and the in-tree
/// policies enforce it. One line each, naming the rule, its file and the
/// namespace. Rules that match every namespace are not named: the exclusion
/// is documented, and they are meant for the others.
pub fn excluded_namespace_warnings(plan: &Plan, options: &Options) -> Vec<String> {
    let excluded = [SYSTEM_NAMESPACE, options.kadmit_namespace.as_str()];
    let mut warnings = Vec::new();
    for rule in plan.rules() {
        let Some(namespace) = excluded
            .into_iter()
            .find(|namespace| rule.matcher.names_namespace(namespace))
        else {
            continue;
        };
        let file = usize::try_from(rule.rule_set.0)
            .ok()
            .and_then(|i| plan.rule_sets().get(i))
            .map_or("", |info| &*info.file);
        warnings.push(format!(
            "{file}: warning: rule {}/{} matches namespace {namespace}, which every webhook \
             entry excludes: kadmit is never sent its requests there (the in-tree policies \
             of `kadmit policies` do enforce it)",
            rule.rule_set_name, rule.name
        ));
    }
    warnings
}

/// What calling the mutating entries one after another changes, one line
/// per rule concerned: kadmit applies one entry's rules to a fixpoint, and
/// the API server calls the entries in their order and reinvokes each at
/// most once ([`crate::mutation_order::webhook_notes`]), so a chain of
/// three rules across three entries, or two order-dependent writes in
/// entries called in the other order than the rule files', come out
/// otherwise than `kadmit test` shows. None with [`Layout::Single`]: one
/// entry is one call.
pub fn mutation_order_warnings(plan: &Plan, options: &Options) -> Vec<String> {
    let sets = served_sets(plan);
    // Each rule set's position in the order its mutating entry is called,
    // and whether each entry has an object selector.
    let mut entry_of: Vec<Option<usize>> = vec![None; sets.len()];
    let position = |set: &CheckedSet<'_>| {
        sets.iter()
            .position(|other| std::ptr::eq(other.info, set.info))
    };
    let selects = |members: &[&CheckedSet<'_>]| {
        shared_object_selector(
            members
                .iter()
                .flat_map(|set| set.serving(Kind::Mutating))
                .map(|rule| rule.rule),
        )
        .is_some()
    };
    let mut selective: Vec<bool> = Vec::new();
    match options.layout {
        Layout::Single => return Vec::new(),
        Layout::Grouped => {
            for (entry, group) in groups(Kind::Mutating, &sets).iter().enumerate() {
                selective.push(selects(group));
                for set in group {
                    if let Some(slot) = position(set).and_then(|i| entry_of.get_mut(i)) {
                        *slot = Some(entry);
                    }
                }
            }
        }
        Layout::PerRuleSet => {
            // In the order of the entries' names, as [`EntryCommon::entries`]
            // lists them: `{set}.mutate.kadmit.dev`, where `a-b.` comes
            // before `a.`.
            let entry_name = |set: &CheckedSet<'_>| {
                format!("{}.{}.{WEBHOOK_DOMAIN}", set.name(), Kind::Mutating.verb())
            };
            let mut by_name: Vec<usize> = (0..sets.len()).collect();
            by_name.sort_by_cached_key(|&i| sets.get(i).map(entry_name));
            for (entry, set) in by_name.into_iter().enumerate() {
                selective.push(sets.get(set).is_some_and(|set| selects(&[set])));
                if let Some(slot) = entry_of.get_mut(set) {
                    *slot = Some(entry);
                }
            }
        }
    }
    let mut rules: Vec<&CompiledRule> = Vec::new();
    let mut entries: Vec<usize> = Vec::new();
    for rule in plan.rules() {
        if !Kind::Mutating.serves(rule) {
            continue;
        }
        if let Some(Some(entry)) = entry_of.get(rule.rule_set.0 as usize) {
            rules.push(rule);
            entries.push(*entry);
        }
    }
    crate::mutation_order::webhook_notes(&rules, &entries, &selective)
        .into_iter()
        .filter_map(|note| {
            let rule = rules.get(note.rule)?;
            let file = plan
                .rule_sets()
                .get(rule.rule_set.0 as usize)
                .map_or("", |info| &*info.file);
            Some(format!(
                "{file}: warning: rule {}/{}: {}",
                rule.rule_set_name, rule.name, note.text
            ))
        })
        .collect()
}

/// The plan's compiler has checked everything a configuration needs of the
/// rules (names that are DNS labels and unique, timeouts, resource
/// patterns); this fails only when no rule mutates or validates anything,
/// or on the options (namespace, CA bundle, a catch-all entry for rule sets
/// with different namespace selectors).
pub fn generate(plan: &Plan, options: &Options) -> Result<Configurations, GenerateError> {
    if !is_dns_label(&options.kadmit_namespace) {
        return Err(GenerateError::Namespace(options.kadmit_namespace.clone()));
    }
    let sets = served_sets(plan);
    if let Some(pem) = &options.ca_bundle_pem {
        check_ca_bundle(pem)?;
    }
    let context = EntryCommon {
        options,
        ca_bundle: options.ca_bundle_pem.as_deref(),
    };
    let mutating = context.entries(Kind::Mutating, &sets)?;
    let validating = context.entries(Kind::Validating, &sets)?;
    if mutating.is_empty() && validating.is_empty() {
        return Err(GenerateError::NothingToAdmit);
    }
    Ok(Configurations {
        mutating: (!mutating.is_empty()).then(|| MutatingWebhookConfiguration {
            metadata: configuration_metadata(),
            webhooks: Some(mutating.into_iter().map(self::mutating).collect()),
        }),
        validating: (!validating.is_empty()).then(|| ValidatingWebhookConfiguration {
            metadata: configuration_metadata(),
            webhooks: Some(validating),
        }),
    })
}

/// A rule set of the plan, with its rules' requests.
struct CheckedSet<'a> {
    info: &'a RuleSetInfo,
    rules: Vec<CheckedRule<'a>>,
}

impl CheckedSet<'_> {
    fn name(&self) -> &str {
        &self.info.name
    }

    /// The rules evaluated at `kind`'s endpoint.
    fn serving(&self, kind: Kind) -> impl Iterator<Item = &CheckedRule<'_>> {
        self.rules.iter().filter(move |rule| kind.serves(rule.rule))
    }

    fn failure_policy(&self) -> FailurePolicy {
        self.info.failure_policy.unwrap_or(FailurePolicy::Fail)
    }

    fn timeout_seconds(&self) -> u32 {
        self.info.timeout_seconds.unwrap_or(DEFAULT_TIMEOUT_SECONDS)
    }

    /// What the API server must see alike for rule sets to share an entry.
    fn key(
        &self,
    ) -> (
        FailurePolicy,
        u32,
        &Option<LabelSelector>,
        &[MatchCondition],
    ) {
        (
            self.failure_policy(),
            self.timeout_seconds(),
            &self.info.namespace_selector,
            &self.info.match_conditions,
        )
    }

    /// The object selector this set's entry of `kind` would have alone.
    fn object_selector(&self, kind: Kind) -> Option<LabelSelector> {
        shared_object_selector(self.serving(kind).map(|rule| rule.rule))
    }
}

struct CheckedRule<'a> {
    rule: &'a CompiledRule,
    atoms: Vec<Atom>,
}

/// The plan's rule sets with their rules (included ones among them, as the
/// plan serves them) and the requests each rule matches.
fn served_sets(plan: &Plan) -> Vec<CheckedSet<'_>> {
    let mut sets: Vec<CheckedSet<'_>> = plan
        .rule_sets()
        .iter()
        .map(|info| CheckedSet {
            info,
            rules: Vec::new(),
        })
        .collect();
    for rule in plan.rules() {
        if let Some(set) = sets.get_mut(rule.rule_set.0 as usize) {
            set.rules.push(CheckedRule {
                rule,
                atoms: Atom::of(&rule.matcher),
            });
        }
    }
    sets
}

/// The rule sets of `kind` that share an entry in [`Layout::Grouped`], in
/// rule-set order, each group in rule-set order.
///
/// The API server calls validating entries in parallel, so a validating set
/// joins the first group it can. It calls mutating entries one after
/// another, in the order they are listed, so a mutating set only joins the
/// group of the set before it: the calls stay in rule-set order, the order
/// `kadmit test` and the catch-all `/mutate` apply them in.
fn groups<'s, 'a>(kind: Kind, sets: &'s [CheckedSet<'a>]) -> Vec<Vec<&'s CheckedSet<'a>>> {
    let mut groups: Vec<Vec<&'s CheckedSet<'a>>> = Vec::new();
    for set in sets {
        if set.serving(kind).all(|rule| rule.atoms.is_empty()) {
            continue;
        }
        let found = match kind {
            Kind::Mutating => groups.last_mut().filter(|group| can_join(kind, group, set)),
            Kind::Validating => groups.iter_mut().find(|group| can_join(kind, group, set)),
        };
        match found {
            Some(group) => group.push(set),
            None => groups.push(vec![set]),
        }
    }
    groups
}

/// Whether `set` can share `group`'s entry: the API server would treat them
/// alike (failure policy, timeout, namespace selector), the entry's name
/// stays a DNS subdomain, and its object selector is theirs or widens
/// nothing.
///
/// Rule sets with different object selectors can share an entry without
/// one only when every request a selector would have held back is sent for
/// another member anyway (log-shipper's labelled Pods, when pod-defaults
/// takes every Pod): kadmit checks each rule's own `objectSelector` itself,
/// so merging changes which calls are made, never a verdict.
fn can_join(kind: Kind, group: &[&CheckedSet<'_>], set: &CheckedSet<'_>) -> bool {
    let Some(first) = group.first() else {
        return true;
    };
    if first.key() != set.key() {
        return false;
    }
    let names_bytes: usize = group
        .iter()
        .map(|member| member.name().len() + RULE_SET_SEPARATOR.len_utf8())
        .sum::<usize>()
        + set.name().len();
    // The entry's name is `{names}.{verb}.kadmit.dev`, at most 253 bytes.
    let suffix_bytes = 2 + kind.verb().len() + WEBHOOK_DOMAIN.len();
    if names_bytes + suffix_bytes > MAX_RULE_SETS_SEGMENT_BYTES {
        return false;
    }
    let members: Vec<(&CheckedSet<'_>, Option<LabelSelector>)> = group
        .iter()
        .copied()
        .chain(std::iter::once(set))
        .map(|member| (member, member.object_selector(kind)))
        .collect();
    let first_selector = first.object_selector(kind);
    if members
        .iter()
        .all(|(_, selector)| *selector == first_selector)
    {
        return true;
    }
    let unselected: Vec<&Atom> = members
        .iter()
        .filter(|(_, selector)| selector.is_none())
        .flat_map(|(member, _)| member.serving(kind))
        .flat_map(|rule| rule.atoms.iter())
        .collect();
    members
        .iter()
        .filter(|(_, selector)| selector.is_some())
        .flat_map(|(member, _)| member.serving(kind))
        .flat_map(|rule| rule.atoms.iter())
        .all(|atom| unselected.iter().any(|wide| wide.covers(atom)))
}

/// What every entry shares.
struct EntryCommon<'a> {
    options: &'a Options,
    /// The PEM CA bundle (the API type base64-encodes it).
    ca_bundle: Option<&'a [u8]>,
}

impl EntryCommon<'_> {
    /// The entries of `kind`, each shaped as a `ValidatingWebhook` (a
    /// `MutatingWebhook` has the same fields and one more, see
    /// [`mutating`]): grouped entries in rule-set order (the order the API
    /// server calls mutating entries in), one entry per rule set sorted by
    /// name, as that layout always has.
    fn entries(
        &self,
        kind: Kind,
        sets: &[CheckedSet<'_>],
    ) -> Result<Vec<ValidatingWebhook>, GenerateError> {
        let mut webhooks = Vec::new();
        match self.options.layout {
            Layout::Grouped => {
                for group in groups(kind, sets) {
                    let names: Vec<&str> = group.iter().map(|set| set.name()).collect();
                    webhooks.extend(self.entry(kind, Some(&names), &group)?);
                }
            }
            Layout::PerRuleSet => {
                for set in sets {
                    webhooks.extend(self.entry(kind, Some(&[set.name()]), &[set])?);
                }
                webhooks.sort_by(|a, b| a.name.cmp(&b.name));
            }
            Layout::Single => {
                let all: Vec<&CheckedSet<'_>> = sets.iter().collect();
                webhooks.extend(self.entry(kind, None, &all)?);
            }
        }
        Ok(webhooks)
    }

    /// The entry of `kind` for `sets`, at the path naming `rule_sets` (or the
    /// catch-all entry); `None` when none of their rules is served by `kind`.
    fn entry(
        &self,
        kind: Kind,
        rule_sets: Option<&[&str]>,
        sets: &[&CheckedSet<'_>],
    ) -> Result<Option<ValidatingWebhook>, GenerateError> {
        let serving: Vec<&CheckedSet<'_>> = sets
            .iter()
            .copied()
            .filter(|set| set.serving(kind).next().is_some())
            .collect();
        let atoms: Vec<Atom> = serving
            .iter()
            .flat_map(|set| set.serving(kind))
            .flat_map(|rule| rule.atoms.iter().cloned())
            .collect();
        let rules = group(atoms);
        if rules.is_empty() {
            return Ok(None);
        }
        let (name, path) = match rule_sets {
            Some(names) => {
                let segment = rule_sets_segment(names.iter().copied());
                (
                    format!("{segment}.{}.{WEBHOOK_DOMAIN}", kind.verb()),
                    format!("/{}/{segment}", kind.verb()),
                )
            }
            None => (
                format!("{}.{WEBHOOK_DOMAIN}", kind.verb()),
                format!("/{}", kind.verb()),
            ),
        };
        // One entry serving several rule sets must honour the strictest of
        // them: a set that asked for Fail must not silently become Ignore,
        // nor be cut off before its own timeout.
        let failure_policy = if serving
            .iter()
            .any(|set| set.failure_policy() == FailurePolicy::Fail)
        {
            FailurePolicy::Fail
        } else {
            FailurePolicy::Ignore
        };
        let timeout_seconds = serving
            .iter()
            .map(|set| set.timeout_seconds())
            .max()
            .unwrap_or(DEFAULT_TIMEOUT_SECONDS);
        let namespace_selector = self.namespace_selector(&serving)?;
        let object_selector = shared_object_selector(
            serving
                .iter()
                .flat_map(|set| set.serving(kind))
                .map(|rule| rule.rule),
        );
        Ok(Some(ValidatingWebhook {
            name,
            client_config: self.client_config(path),
            rules: Some(rules.iter().map(RuleGroup::to_api).collect()),
            namespace_selector: Some(label_selector(&namespace_selector)),
            object_selector: object_selector.as_ref().map(label_selector),
            failure_policy: Some(
                match failure_policy {
                    FailurePolicy::Fail => "Fail",
                    FailurePolicy::Ignore => "Ignore",
                }
                .to_owned(),
            ),
            timeout_seconds: Some(i32::try_from(timeout_seconds).unwrap_or(30)),
            // kadmit changes nothing outside the response, so it is also
            // called for dry-run requests.
            side_effects: "None".to_owned(),
            // A request made through another version of a matched resource
            // (e.g. a deprecated group) is converted and sent too, so a
            // policy cannot be bypassed by picking the version.
            match_policy: Some("Equivalent".to_owned()),
            // kadmit answers in the version it is asked in.
            admission_review_versions: vec!["v1".to_owned(), "v1beta1".to_owned()],
            match_conditions: shared_match_conditions(&serving),
        }))
    }

    fn client_config(&self, path: String) -> WebhookClientConfig {
        let (service, url) = match &self.options.client {
            Client::Service(service) => (
                Some(ServiceReference {
                    namespace: service.namespace.clone(),
                    name: service.name.clone(),
                    path: Some(path),
                    port: service.port.map(i32::from),
                }),
                None,
            ),
            Client::Url(url) => (None, Some(format!("{}{path}", url.as_str()))),
        };
        WebhookClientConfig {
            service,
            url,
            ca_bundle: self
                .ca_bundle
                .map(|pem| k8s_openapi::ByteString(pem.to_vec())),
        }
    }

    /// The exclusion of `kube-system` and kadmit's namespace, and the
    /// selector the rule sets declare (which must be one and the same when
    /// several sets share the entry: the API server evaluates it, kadmit
    /// cannot, since reviews do not carry namespace labels).
    fn namespace_selector(
        &self,
        serving: &[&CheckedSet<'_>],
    ) -> Result<LabelSelector, GenerateError> {
        let mut declared: Option<(&str, &Option<LabelSelector>)> = None;
        for set in serving {
            let selector = &set.info.namespace_selector;
            match declared {
                None => declared = Some((set.name(), selector)),
                Some((first, first_selector)) if first_selector != selector => {
                    return Err(GenerateError::ConflictingNamespaceSelectors {
                        first: first.to_owned(),
                        second: set.name().to_owned(),
                    });
                }
                Some(_) => {}
            }
        }
        let excluded: BTreeSet<String> = [
            SYSTEM_NAMESPACE.to_owned(),
            self.options.kadmit_namespace.clone(),
        ]
        .into();
        let exclusion = LabelSelectorRequirement {
            key: NAMESPACE_NAME_LABEL.to_owned(),
            operator: SelectorOperator::NotIn,
            values: excluded.into_iter().collect(),
        };
        let mut selector = declared
            .and_then(|(_, selector)| selector.clone())
            .unwrap_or_default();
        selector.match_expressions.retain(|e| *e != exclusion);
        selector.match_expressions.insert(0, exclusion);
        Ok(selector)
    }
}

/// The `matchConditions` of an entry: those of its rule sets when all have
/// the same (grouped entries always do), none otherwise (a `--single` entry
/// for rule sets with different ones: kadmit checks each set's own, so the
/// API server only sends more requests than it needs to).
fn shared_match_conditions(sets: &[&CheckedSet<'_>]) -> Option<Vec<ApiMatchCondition>> {
    let first = &sets.first()?.info.match_conditions;
    if first.is_empty() || sets.iter().any(|set| set.info.match_conditions != *first) {
        return None;
    }
    Some(
        first
            .iter()
            .map(|condition| ApiMatchCondition {
                name: condition.name.clone(),
                expression: condition.expression.clone(),
            })
            .collect(),
    )
}

/// Name and labels of a generated configuration.
fn configuration_metadata() -> meta::ObjectMeta {
    meta::ObjectMeta {
        name: Some(CONFIGURATION_NAME.to_owned()),
        labels: Some(BTreeMap::from([
            ("app.kubernetes.io/name".to_owned(), "kadmit".to_owned()),
            (
                "app.kubernetes.io/component".to_owned(),
                "admission-webhook".to_owned(),
            ),
        ])),
        ..meta::ObjectMeta::default()
    }
}

/// The mutating entry of the same shape: `reinvocationPolicy: IfNeeded`,
/// since kadmit's mutations are idempotent, so calling it again after
/// another webhook's change is safe and lets it default what that webhook
/// added (say, an injected container).
fn mutating(entry: ValidatingWebhook) -> MutatingWebhook {
    MutatingWebhook {
        admission_review_versions: entry.admission_review_versions,
        client_config: entry.client_config,
        failure_policy: entry.failure_policy,
        match_conditions: entry.match_conditions,
        match_policy: entry.match_policy,
        name: entry.name,
        namespace_selector: entry.namespace_selector,
        object_selector: entry.object_selector,
        reinvocation_policy: Some("IfNeeded".to_owned()),
        rules: entry.rules,
        side_effects: entry.side_effects,
        timeout_seconds: entry.timeout_seconds,
    }
}

/// A rule file's label selector as the API's.
pub(crate) fn label_selector(selector: &LabelSelector) -> meta::LabelSelector {
    meta::LabelSelector {
        match_labels: (!selector.match_labels.is_empty()).then(|| selector.match_labels.clone()),
        match_expressions: (!selector.match_expressions.is_empty()).then(|| {
            selector
                .match_expressions
                .iter()
                .map(|requirement| meta::LabelSelectorRequirement {
                    key: requirement.key.clone(),
                    operator: match requirement.operator {
                        SelectorOperator::In => "In",
                        SelectorOperator::NotIn => "NotIn",
                        SelectorOperator::Exists => "Exists",
                        SelectorOperator::DoesNotExist => "DoesNotExist",
                    }
                    .to_owned(),
                    values: (!requirement.values.is_empty()).then(|| requirement.values.clone()),
                })
                .collect()
        }),
    }
}

/// The object selector every rule has, when they all have the same
/// non-empty one; a rule without a selector needs every object.
fn shared_object_selector<'r>(
    mut rules: impl Iterator<Item = &'r CompiledRule>,
) -> Option<LabelSelector> {
    let selector = |rule: &CompiledRule| {
        rule.matcher
            .object_selector
            .as_ref()
            .map(|matcher| matcher.selector().clone())
            .filter(|selector| *selector != LabelSelector::default())
    };
    let first = selector(rules.next()?)?;
    rules
        .all(|rule| selector(rule).as_ref() == Some(&first))
        .then_some(first)
}

/// Checks that a CA bundle holds PEM certificates and nothing else.
fn check_ca_bundle(pem: &[u8]) -> Result<(), GenerateError> {
    let text = std::str::from_utf8(pem)
        .map_err(|_| GenerateError::CaBundle("the file is not PEM text".to_owned()))?;
    // The whole file goes into the configuration, readable by anyone who can
    // read webhook configurations: never a key.
    if text.contains("PRIVATE KEY-----") {
        return Err(GenerateError::CaBundle(
            "the file holds a private key; pass only the CA certificate".to_owned(),
        ));
    }
    let mut certificates = 0;
    for certificate in CertificateDer::pem_slice_iter(pem) {
        certificate.map_err(|error| GenerateError::CaBundle(format!("bad PEM: {error}")))?;
        certificates += 1;
    }
    if certificates == 0 {
        return Err(GenerateError::CaBundle(
            "the file holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_owned(),
        ));
    }
    Ok(())
}

/// One (operation, group, version, resource, scope) combination that a rule
/// matches. Wildcards stay wildcards: `*` covers what it names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Atom {
    operation: u8,
    group: String,
    version: String,
    resource: String,
    scope: u8,
}

/// Operations in their canonical order; `*` last.
const OPERATIONS: [OperationPattern; 5] = [
    OperationPattern::Create,
    OperationPattern::Update,
    OperationPattern::Delete,
    OperationPattern::Connect,
    OperationPattern::All,
];
const ALL_OPERATIONS: u8 = 4;

const SCOPES: [Scope; 3] = [Scope::All, Scope::Cluster, Scope::Namespaced];
const ALL_SCOPES: u8 = 0;

fn rank<T: PartialEq>(table: &[T], value: &T) -> u8 {
    table
        .iter()
        .position(|entry| entry == value)
        .and_then(|index| u8::try_from(index).ok())
        .unwrap_or_default()
}

impl Atom {
    /// Every (operation, group, version, resource, scope) a matcher's
    /// operations and resources combine; all four operations are `*`.
    fn of(matcher: &Matcher) -> Vec<Atom> {
        let operations: Vec<OperationPattern> = if Operation::ALL
            .iter()
            .all(|operation| matcher.has_operation(*operation))
        {
            vec![OperationPattern::All]
        } else {
            Operation::ALL
                .iter()
                .filter(|operation| matcher.has_operation(**operation))
                .map(|operation| match operation {
                    Operation::Create => OperationPattern::Create,
                    Operation::Update => OperationPattern::Update,
                    Operation::Delete => OperationPattern::Delete,
                    Operation::Connect => OperationPattern::Connect,
                })
                .collect()
        };
        let mut atoms = Vec::new();
        for resources in &matcher.resources {
            let scope = rank(&SCOPES, &resources.scope);
            for operation in &operations {
                for group in &resources.groups {
                    for version in &resources.versions {
                        for (resource, sub) in &resources.resources {
                            atoms.push(Atom {
                                operation: rank(&OPERATIONS, operation),
                                group: group.clone(),
                                version: version.clone(),
                                resource: if sub.is_empty() {
                                    resource.clone()
                                } else {
                                    format!("{resource}/{sub}")
                                },
                                scope,
                            });
                        }
                    }
                }
            }
        }
        atoms
    }

    /// Whether every request `other` matches is matched by `self`, with the
    /// API server's semantics: `*` is every resource without subresources,
    /// `pods/*` is pods and all its subresources, `*/*` everything.
    fn covers(&self, other: &Atom) -> bool {
        let (resource, sub) = split_resource(&self.resource);
        let (other_resource, other_sub) = split_resource(&other.resource);
        (self.operation == ALL_OPERATIONS || self.operation == other.operation)
            && (self.group == "*" || self.group == other.group)
            && (self.version == "*" || self.version == other.version)
            && (resource == "*" || resource == other_resource)
            && (sub == "*" || sub == other_sub)
            && (self.scope == ALL_SCOPES || self.scope == other.scope)
    }
}

fn split_resource(resource: &str) -> (&str, &str) {
    resource.split_once('/').unwrap_or((resource, ""))
}

/// Turns combinations into as few `rules` entries as keep the match exact.
///
/// Combinations covered by another are dropped first. Then entries are merged
/// one dimension at a time (operations, resources, groups, versions), and
/// only entries that agree on every other dimension: the union of the
/// entries' cross products stays exactly the set of combinations. Because no
/// kept combination covers another, no entry ends up with both `*` and a
/// name in one list, which the API server would reject.
fn group(atoms: Vec<Atom>) -> Vec<RuleGroup> {
    let atoms: BTreeSet<Atom> = atoms.into_iter().collect();
    let kept: Vec<&Atom> = atoms
        .iter()
        .filter(|atom| {
            !atoms
                .iter()
                .any(|other| other != *atom && other.covers(atom))
        })
        .collect();

    type Set = BTreeSet<String>;
    let mut by_target: BTreeMap<(&str, &str, &str, u8), BTreeSet<u8>> = BTreeMap::new();
    for atom in &kept {
        by_target
            .entry((&atom.group, &atom.version, &atom.resource, atom.scope))
            .or_default()
            .insert(atom.operation);
    }
    let mut by_resource: BTreeMap<(BTreeSet<u8>, &str, &str, u8), Set> = BTreeMap::new();
    for ((group, version, resource, scope), operations) in by_target {
        by_resource
            .entry((operations, group, version, scope))
            .or_default()
            .insert(resource.to_owned());
    }
    let mut by_group: BTreeMap<(BTreeSet<u8>, &str, u8, Set), Set> = BTreeMap::new();
    for ((operations, group, version, scope), resources) in by_resource {
        by_group
            .entry((operations, version, scope, resources))
            .or_default()
            .insert(group.to_owned());
    }
    let mut by_version: BTreeMap<(BTreeSet<u8>, Set, u8, Set), Set> = BTreeMap::new();
    for ((operations, version, scope, resources), groups) in by_group {
        by_version
            .entry((operations, groups, scope, resources))
            .or_default()
            .insert(version.to_owned());
    }
    let mut entries: Vec<(Set, Set, Set, BTreeSet<u8>, u8)> = by_version
        .into_iter()
        .map(|((operations, groups, scope, resources), versions)| {
            (groups, resources, versions, operations, scope)
        })
        .collect();
    entries.sort();
    entries
        .into_iter()
        .map(
            |(groups, resources, versions, operations, scope)| RuleGroup {
                operations: operations
                    .into_iter()
                    .map(|op| OPERATIONS[usize::from(op)])
                    .collect(),
                api_groups: groups.into_iter().collect(),
                api_versions: versions.into_iter().collect(),
                resources: resources.into_iter().collect(),
                scope: SCOPES[usize::from(scope)],
            },
        )
        .collect()
}

/// One entry of a webhook's `rules` as [`group`] builds it: every
/// combination of its operations, groups, versions and resources, within its
/// scope.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RuleGroup {
    /// Operations, in the order CREATE, UPDATE, DELETE, CONNECT (or `*`).
    operations: Vec<OperationPattern>,
    /// API groups, sorted (`""` is core).
    api_groups: Vec<String>,
    /// API versions, sorted.
    api_versions: Vec<String>,
    /// Resources with subresources, sorted.
    resources: Vec<String>,
    scope: Scope,
}

impl RuleGroup {
    /// The entry as the API writes it.
    fn to_api(&self) -> RuleWithOperations {
        RuleWithOperations {
            operations: Some(
                self.operations
                    .iter()
                    .map(|operation| operation_name(*operation).to_owned())
                    .collect(),
            ),
            api_groups: Some(self.api_groups.clone()),
            api_versions: Some(self.api_versions.clone()),
            resources: Some(self.resources.clone()),
            scope: Some(scope_name(self.scope).to_owned()),
        }
    }
}

/// How the API spells an operation.
fn operation_name(operation: OperationPattern) -> &'static str {
    match operation {
        OperationPattern::Create => "CREATE",
        OperationPattern::Update => "UPDATE",
        OperationPattern::Delete => "DELETE",
        OperationPattern::Connect => "CONNECT",
        OperationPattern::All => "*",
    }
}

/// How the API spells a scope.
pub(crate) fn scope_name(scope: Scope) -> &'static str {
    match scope {
        Scope::Cluster => "Cluster",
        Scope::Namespaced => "Namespaced",
        Scope::All => "*",
    }
}

/// An RFC 1123 label: what namespaces, Services and rule sets are named.
fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn atom(operation: OperationPattern, group: &str, resource: &str, scope: Scope) -> Atom {
        Atom {
            operation: rank(&OPERATIONS, &operation),
            group: group.to_owned(),
            version: "*".to_owned(),
            resource: resource.to_owned(),
            scope: rank(&SCOPES, &scope),
        }
    }

    #[test]
    fn covers_follows_the_api_server_resource_semantics() {
        use OperationPattern::Create;
        let cases = [
            ("*", "pods", true),
            ("*", "pods/status", false),
            ("*/*", "pods/status", true),
            ("pods/*", "pods", true),
            ("pods/*", "pods/status", true),
            ("pods/*", "deployments/status", false),
            ("*/status", "pods/status", true),
            ("*/status", "pods", false),
            ("pods", "pods/status", false),
        ];
        for (wide, narrow, expected) in cases {
            let wide = atom(Create, "", wide, Scope::All);
            let narrow = atom(Create, "", narrow, Scope::All);
            assert_eq!(wide.covers(&narrow), expected, "{wide:?} covers {narrow:?}");
        }
        let all = atom(OperationPattern::All, "*", "pods", Scope::All);
        assert!(all.covers(&atom(
            OperationPattern::Delete,
            "",
            "pods",
            Scope::Namespaced
        )));
        let namespaced = atom(Create, "", "pods", Scope::Namespaced);
        assert!(!namespaced.covers(&atom(Create, "", "pods", Scope::All)));
    }

    #[test]
    fn group_keeps_groups_apart_and_merges_what_it_can() {
        use OperationPattern::{Create, Update};
        let atoms = vec![
            atom(Create, "", "pods", Scope::All),
            atom(Update, "", "pods", Scope::All),
            atom(Create, "apps", "deployments", Scope::All),
            atom(Update, "apps", "deployments", Scope::All),
            atom(Create, "apps", "statefulsets", Scope::All),
            atom(Update, "apps", "statefulsets", Scope::All),
            atom(Create, "apps", "deployments", Scope::All), // a duplicate
        ];
        let rules = group(atoms);
        assert_eq!(rules.len(), 2, "{rules:#?}");
        assert_eq!(rules[0].api_groups, [""]);
        assert_eq!(rules[0].resources, ["pods"]);
        assert_eq!(rules[1].api_groups, ["apps"]);
        assert_eq!(rules[1].resources, ["deployments", "statefulsets"]);
        assert_eq!(rules[1].operations, [Create, Update]);
    }

    #[test]
    fn group_drops_what_a_wildcard_covers() {
        use OperationPattern::{All, Create};
        let rules = group(vec![
            atom(Create, "", "pods", Scope::Namespaced),
            atom(All, "", "pods", Scope::All),
            atom(Create, "", "pods/status", Scope::All),
            atom(Create, "", "pods/*", Scope::All),
        ]);
        assert_eq!(rules.len(), 2, "{rules:#?}");
        assert_eq!(rules[0].operations, [All]);
        assert_eq!(rules[0].resources, ["pods"]);
        assert_eq!(rules[1].operations, [Create]);
        assert_eq!(rules[1].resources, ["pods/*"]);
    }

    const UNIVERSE_OPERATIONS: [OperationPattern; 4] = [
        OperationPattern::Create,
        OperationPattern::Update,
        OperationPattern::Delete,
        OperationPattern::Connect,
    ];
    const UNIVERSE_GROUPS: [&str; 3] = ["", "apps", "example.com"];
    const UNIVERSE_VERSIONS: [&str; 2] = ["v1", "v2"];
    const UNIVERSE_RESOURCES: [&str; 5] = [
        "pods",
        "pods/status",
        "deployments",
        "deployments/scale",
        "widgets/scale",
    ];
    const UNIVERSE_SCOPES: [Scope; 2] = [Scope::Cluster, Scope::Namespaced];

    /// Every concrete request of a small universe.
    fn universe() -> Vec<Atom> {
        let mut out = Vec::new();
        for operation in UNIVERSE_OPERATIONS {
            for group in UNIVERSE_GROUPS {
                for version in UNIVERSE_VERSIONS {
                    for resource in UNIVERSE_RESOURCES {
                        for scope in UNIVERSE_SCOPES {
                            out.push(Atom {
                                operation: rank(&OPERATIONS, &operation),
                                group: group.to_owned(),
                                version: version.to_owned(),
                                resource: resource.to_owned(),
                                scope: rank(&SCOPES, &scope),
                            });
                        }
                    }
                }
            }
        }
        out
    }

    fn arbitrary_atom() -> impl Strategy<Value = Atom> {
        (
            prop::sample::select(OPERATIONS.to_vec()),
            prop::sample::select(vec!["", "apps", "example.com", "*"]),
            prop::sample::select(vec!["v1", "v2", "*"]),
            prop::sample::select(vec![
                "pods",
                "pods/status",
                "pods/*",
                "deployments",
                "deployments/scale",
                "*/scale",
                "*",
                "*/*",
            ]),
            prop::sample::select(SCOPES.to_vec()),
        )
            .prop_map(|(operation, group, version, resource, scope)| Atom {
                operation: rank(&OPERATIONS, &operation),
                group: group.to_owned(),
                version: version.to_owned(),
                resource: resource.to_owned(),
                scope: rank(&SCOPES, &scope),
            })
    }

    fn rule_matches(rule: &RuleGroup, request: &Atom) -> bool {
        let scope = rank(&SCOPES, &rule.scope);
        rule.operations.iter().any(|operation| {
            rule.api_groups.iter().any(|group| {
                rule.api_versions.iter().any(|version| {
                    rule.resources.iter().any(|resource| {
                        Atom {
                            operation: rank(&OPERATIONS, operation),
                            group: group.clone(),
                            version: version.clone(),
                            resource: resource.clone(),
                            scope,
                        }
                        .covers(request)
                    })
                })
            })
        })
    }

    /// The API server rejects a list holding `*` next to a name it covers.
    fn assert_api_valid(rule: &RuleGroup) {
        fn exclusive(list: &[String], what: &str) {
            assert!(
                !list.contains(&"*".to_owned()) || list.len() == 1,
                "{what} mixes * with names: {list:?}"
            );
        }
        exclusive(&rule.api_groups, "apiGroups");
        exclusive(&rule.api_versions, "apiVersions");
        assert!(
            !rule.operations.contains(&OperationPattern::All) || rule.operations.len() == 1,
            "operations mix *: {:?}",
            rule.operations
        );
        for (i, a) in rule.resources.iter().enumerate() {
            for (j, b) in rule.resources.iter().enumerate() {
                let (ra, sa) = split_resource(a);
                let (rb, sb) = split_resource(b);
                let covers = (ra == "*" || ra == rb) && (sa == "*" || sa == sb);
                assert!(i == j || !covers, "resources {a} and {b} overlap");
            }
        }
    }

    proptest! {
        /// Grouping never widens nor narrows what is sent to kadmit.
        #[test]
        fn grouping_matches_exactly_the_same_requests(
            atoms in prop::collection::vec(arbitrary_atom(), 0..12)
        ) {
            let rules = group(atoms.clone());
            for rule in &rules {
                assert_api_valid(rule);
            }
            for request in universe() {
                let wanted = atoms.iter().any(|atom| atom.covers(&request));
                let sent = rules.iter().any(|rule| rule_matches(rule, &request));
                prop_assert_eq!(wanted, sent, "request {:?} in {:#?}", request, rules);
            }
        }
    }

    #[test]
    fn a_path_segment_names_rule_sets_in_plan_order_or_says_why_not() {
        let text = [
            rule_set("alpha", "", "validate", "pods", ""),
            rule_set("beta", "", "validate", "pods", ""),
        ]
        .concat();
        let plan = crate::plan::compile(&crate::rules::load_str("sets.yaml", &text))
            .unwrap_or_else(|d| panic!("{d}"));
        let alpha = plan.rule_set_id("alpha").expect("alpha");
        let beta = plan.rule_set_id("beta").expect("beta");
        assert_eq!(rule_set_ids(&plan, "beta.alpha"), Ok(vec![alpha, beta]));
        assert_eq!(rule_set_ids(&plan, "beta"), Ok(vec![beta]));
        assert_eq!(
            rule_set_ids(&plan, "alpha.gamma"),
            Err(RuleSetsError::Unknown("gamma".to_owned()))
        );
        assert_eq!(
            rule_set_ids(&plan, "alpha..beta"),
            Err(RuleSetsError::Path(PathError::EmptyName))
        );
    }

    /// A rule set named `name` whose one rule mutates (or validates) `resource`.
    fn rule_set(name: &str, spec: &str, verb: &str, resource: &str, selector: &str) -> String {
        let action = match verb {
            "mutate" => "mutate: [{setIfAbsent: {path: $.object.metadata.labels.a, value: b}}]",
            _ => "deny: [{path: $.object.metadata.labels.a, exists: true, message: no a}]",
        };
        format!(
            "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata: {{name: {name}}}\n\
             spec:\n  {spec}\n  rules:\n    - name: r\n      match: {{operations: [CREATE], resources: [{resource}]{selector}}}\n      {action}\n---\n"
        )
    }

    /// The paths of the generated entries of `kind`, in order.
    fn paths(text: &str, layout: Layout, kind: Kind) -> Vec<String> {
        let loaded = crate::rules::load_str("sets.yaml", text);
        assert!(loaded.diagnostics.is_empty(), "{}", loaded.diagnostics);
        let mut options = Options::new(Client::Service("kadmit/kadmit".parse().unwrap()));
        options.layout = layout;
        let plan = crate::plan::compile(&loaded).unwrap_or_else(|d| panic!("{d}"));
        let configurations = generate(&plan, &options).unwrap();
        let webhooks: Vec<WebhookClientConfig> = match kind {
            Kind::Mutating => configurations
                .mutating
                .and_then(|c| c.webhooks)
                .unwrap_or_default()
                .into_iter()
                .map(|w| w.client_config)
                .collect(),
            Kind::Validating => configurations
                .validating
                .and_then(|c| c.webhooks)
                .unwrap_or_default()
                .into_iter()
                .map(|w| w.client_config)
                .collect(),
        };
        webhooks
            .into_iter()
            .filter_map(|config| config.service.and_then(|service| service.path))
            .collect()
    }

    const LABELLED: &str = ", objectSelector: {matchLabels: {x: y}}";

    #[test]
    fn rules_naming_an_excluded_namespace_are_warned_about() {
        let text = [
            (r#"namespaces: ["kube-*"]"#, Some("kube-system")),
            (r#"namespaces: [kadmit-system]"#, Some("kadmit-system")),
            (
                r#"namespaces: ["kube-*"], excludeNamespaces: [kube-system]"#,
                None,
            ),
            (r#"namespaces: [team-a]"#, None),
            // Every namespace: the exclusion is documented, not warned of.
            ("excludeNamespaces: [team-b]", None),
        ];
        for (i, (selector, warned)) in text.into_iter().enumerate() {
            let set = rule_set(
                &format!("s{i}"),
                "",
                "validate",
                "pods",
                &format!(", {selector}"),
            );
            let loaded = crate::rules::load_str("sets.yaml", &set);
            assert!(loaded.diagnostics.is_empty(), "{}", loaded.diagnostics);
            let plan = crate::plan::compile(&loaded).unwrap_or_else(|d| panic!("{d}"));
            let options = Options::new(Client::Service("kadmit-system/kadmit".parse().unwrap()));
            let warnings = excluded_namespace_warnings(&plan, &options);
            match warned {
                Some(namespace) => {
                    assert_eq!(warnings.len(), 1, "{selector}: {warnings:?}");
                    assert!(
                        warnings[0].starts_with("sets.yaml: warning: rule")
                            && warnings[0].contains(&format!("/r matches namespace {namespace},")),
                        "{}",
                        warnings[0]
                    );
                }
                None => assert!(warnings.is_empty(), "{selector}: {warnings:?}"),
            }
        }
    }

    #[test]
    fn what_calling_mutating_entries_in_order_changes_is_warned_about() {
        // `third` writes c, which `second` reads to write b, which
        // `first` reads to write a; each set apart from the others (its
        // own timeout), the files in chain order.
        let set = |name: &str, timeout: u32, reads: Option<&str>, writes: &str| {
            let when = reads.map_or(String::new(), |label| {
                format!("\n      when: [{{path: $.object.metadata.labels.{label}, exists: true}}]")
            });
            format!(
                "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata: {{name: {name}}}\n\
                 spec:\n  timeoutSeconds: {timeout}\n  rules:\n    - name: r\n      \
                 match: {{resources: [configmaps]}}{when}\n      mutate:\n        - \
                 setIfAbsent: {{path: $.object.metadata.labels.{writes}, value: set}}\n"
            )
        };
        let warnings = |sets: &[String], layout: Layout| {
            let loaded = crate::rules::load_str("sets.yaml", &sets.join("---\n"));
            assert!(loaded.diagnostics.is_empty(), "{}", loaded.diagnostics);
            let plan = crate::plan::compile(&loaded).unwrap_or_else(|d| panic!("{d}"));
            let mut options = Options::new(Client::Service("kadmit/kadmit".parse().unwrap()));
            options.layout = layout;
            mutation_order_warnings(&plan, &options)
        };
        let chain = [
            set("first", 5, Some("b"), "a"),
            set("second", 6, Some("c"), "b"),
            set("third", 7, None, "c"),
        ];
        for layout in [Layout::Grouped, Layout::PerRuleSet] {
            let found = warnings(&chain, layout);
            assert_eq!(found.len(), 1, "{layout:?}: {found:#?}");
            assert!(
                found[0].starts_with(
                    "sets.yaml: warning: rule first/r: it reads $.object.metadata.labels.b where \
                     second/r writes"
                ) && found[0].contains("reinvokes each (IfNeeded) at most once"),
                "{}",
                found[0]
            );
        }
        assert_eq!(warnings(&chain, Layout::Single), Vec::<String>::new());
        // A longer chain whose entries are not in its order all the way
        // (a reads b, b reads c, c reads d; entries a < c < b < d).
        let four = [
            set("s1", 5, Some("b"), "a"),
            set("s2", 6, Some("d"), "c"),
            set("s3", 7, Some("c"), "b"),
            set("s4", 8, None, "d"),
        ];
        let found = warnings(&four, Layout::Grouped);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(found[0].contains("rule s1/r: it reads"), "{}", found[0]);
        // An entry whose object selector names a label only a later entry
        // writes is never called: a chain of two is enough.
        let gated = [
            "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata: {name: sidecar}\nspec:\n  \
             timeoutSeconds: 5\n  rules:\n    - name: r\n      match: {resources: [configmaps], \
             objectSelector: {matchLabels: {inject: 'yes'}}}\n      mutate:\n        - \
             setIfAbsent: {path: $.object.metadata.labels.injected, value: 'yes'}\n"
                .to_owned(),
            set("labels", 6, None, "inject"),
        ];
        let found = warnings(&gated, Layout::Grouped);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(
            found[0].contains("rule sidecar/r: it reads the objectSelector's label \"inject\""),
            "{}",
            found[0]
        );
        // One entry per rule set is called in the order of the entries'
        // names: `a-b.mutate...` before `a.mutate...`.
        let dashed = [set("a", 5, Some("b"), "a"), set("a-b", 6, None, "b")];
        assert_eq!(warnings(&dashed, Layout::PerRuleSet), Vec::<String>::new());
        // Rules of namespaces that never meet never see one request.
        let apart = |name: &str, namespace: &str, value: &str| {
            format!(
                "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata: {{name: {name}}}\n\
                 spec:\n  rules:\n    - name: r\n      match: {{resources: [configmaps], \
                 namespaces: [{namespace}]}}\n      mutate:\n        - setIfAbsent: {{path: \
                 $.object.metadata.labels.team, value: {value}}}\n"
            )
        };
        let apart = [apart("zz", "team-a", "a"), apart("aa", "team-b", "b")];
        assert_eq!(warnings(&apart, Layout::PerRuleSet), Vec::<String>::new());
        // Sets the API server treats alike share a grouped entry: one call,
        // kadmit's fixpoint.
        let alike = [
            set("first", 5, Some("b"), "a"),
            set("second", 5, Some("c"), "b"),
            set("third", 5, None, "c"),
        ];
        assert_eq!(warnings(&alike, Layout::Grouped), Vec::<String>::new());
        // In the other order each entry sees what the earlier ones wrote.
        let reversed = [
            set("a-third", 5, None, "c"),
            set("b-second", 6, Some("c"), "b"),
            set("c-first", 7, Some("b"), "a"),
        ];
        for layout in [Layout::Grouped, Layout::PerRuleSet] {
            assert_eq!(
                warnings(&reversed, layout),
                Vec::<String>::new(),
                "{layout:?}"
            );
        }
        // One entry per rule set is called in name order: two setIfAbsents
        // of one label then leave the value of the set first by name, not
        // the one the rule files apply first.
        let defaults = |name: &str, value: &str| {
            format!(
                "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata: {{name: {name}}}\n\
                 spec:\n  rules:\n    - name: r\n      match: {{resources: [configmaps]}}\n      \
                 mutate:\n        - setIfAbsent: {{path: $.object.metadata.labels.team, value: {value}}}\n"
            )
        };
        let named_against_order = [
            defaults("zz-defaults", "one"),
            defaults("aa-override", "two"),
        ];
        let found = warnings(&named_against_order, Layout::PerRuleSet);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(
            found[0].starts_with("sets.yaml: warning: rule aa-override/r: it writes")
                && found[0].contains("calls this rule's webhook entry first"),
            "{}",
            found[0]
        );
        // Grouped entries keep the files' order.
        assert_eq!(
            warnings(&named_against_order, Layout::Grouped),
            Vec::<String>::new()
        );
    }

    #[test]
    fn rules_that_admit_nothing_make_no_configuration() {
        let options = Options::new(Client::Service("kadmit/kadmit".parse().unwrap()));
        let empty = crate::plan::compile(&crate::rules::load_files(Vec::new())).unwrap();
        assert!(matches!(
            generate(&empty, &options),
            Err(GenerateError::NothingToAdmit)
        ));
    }

    #[test]
    fn match_conditions_go_on_the_entry_and_keep_unlike_sets_apart() {
        let skip_system = "matchConditions: [{name: not-system, expression: \"request.namespace != 'kube-system'\"}]";
        let text = [
            rule_set("a", skip_system, "validate", "pods", ""),
            rule_set("b", skip_system, "validate", "pods", ""),
            rule_set("c", "failurePolicy: Fail", "validate", "pods", ""),
        ]
        .concat();
        assert_eq!(
            paths(&text, Layout::Grouped, Kind::Validating),
            ["/validate/a.b", "/validate/c"]
        );
        let loaded = crate::rules::load_str("sets.yaml", &text);
        let conditions_of = |layout: Layout| -> Vec<Option<usize>> {
            let mut options = Options::new(Client::Service("kadmit/kadmit".parse().unwrap()));
            options.layout = layout;
            generate(&crate::plan::compile(&loaded).unwrap(), &options)
                .unwrap()
                .validating
                .and_then(|c| c.webhooks)
                .unwrap_or_default()
                .iter()
                .map(|w| w.match_conditions.as_ref().map(Vec::len))
                .collect()
        };
        assert_eq!(conditions_of(Layout::Grouped), [Some(1), None]);
        assert_eq!(conditions_of(Layout::PerRuleSet), [Some(1), Some(1), None]);
        // One entry for sets with different conditions carries none: kadmit
        // checks each set's own.
        assert_eq!(conditions_of(Layout::Single), [None]);
    }

    #[test]
    fn grouped_mutating_entries_keep_rule_set_order() {
        let text = [
            rule_set("a", "failurePolicy: Fail", "mutate", "pods", ""),
            rule_set("b", "failurePolicy: Ignore", "mutate", "pods", ""),
            rule_set("c", "failurePolicy: Fail", "mutate", "pods", ""),
            rule_set("d", "failurePolicy: Fail", "mutate", "pods", ""),
        ]
        .concat();
        // c would fit a's entry, but the API server would then call it
        // before b.
        assert_eq!(
            paths(&text, Layout::Grouped, Kind::Mutating),
            ["/mutate/a", "/mutate/b", "/mutate/c.d"]
        );
        let validating = text.replace(
            "mutate: [{setIfAbsent: {path: $.object.metadata.labels.a, value: b}}]",
            "deny: [{path: $.object.metadata.labels.a, exists: true, message: no a}]",
        );
        // Validating entries are called in parallel: order is moot.
        assert_eq!(
            paths(&validating, Layout::Grouped, Kind::Validating),
            ["/validate/a.c.d", "/validate/b"]
        );
        assert_eq!(
            paths(&validating, Layout::PerRuleSet, Kind::Validating),
            ["/validate/a", "/validate/b", "/validate/c", "/validate/d"]
        );
        assert_eq!(
            paths(&validating, Layout::Single, Kind::Validating),
            ["/validate"]
        );
    }

    #[test]
    fn grouping_separates_what_the_api_server_treats_differently() {
        let text = [
            rule_set("a", "timeoutSeconds: 5", "validate", "pods", ""),
            rule_set("b", "timeoutSeconds: 6", "validate", "pods", ""),
            rule_set(
                "c",
                "namespaceSelector: {matchLabels: {team: x}}",
                "validate",
                "pods",
                "",
            ),
            rule_set("d", "timeoutSeconds: 5", "validate", "pods", ""),
        ]
        .concat();
        assert_eq!(
            paths(&text, Layout::Grouped, Kind::Validating),
            ["/validate/a.d", "/validate/b", "/validate/c"]
        );
    }

    #[test]
    fn an_object_selector_joins_only_where_it_widens_nothing() {
        // b's labelled Pods are sent for a anyway; c's labelled Services are
        // not, so c keeps its own entry and its selector; d shares c's
        // selector exactly, so it joins c.
        let text = [
            rule_set("a", "failurePolicy: Fail", "validate", "pods", ""),
            rule_set("b", "failurePolicy: Fail", "validate", "pods", LABELLED),
            rule_set("c", "failurePolicy: Fail", "validate", "services", LABELLED),
            rule_set(
                "d",
                "failurePolicy: Fail",
                "validate",
                "configmaps",
                LABELLED,
            ),
        ]
        .concat();
        assert_eq!(
            paths(&text, Layout::Grouped, Kind::Validating),
            ["/validate/a.b", "/validate/c.d"]
        );
    }

    #[test]
    fn grouped_names_stay_dns_subdomains() {
        // Forty 20-byte names cannot share one 253-byte entry name.
        let text: String = (0..40)
            .map(|i| {
                rule_set(
                    &format!("rule-set-number-{i:04}"),
                    "failurePolicy: Fail",
                    "validate",
                    "pods",
                    "",
                )
            })
            .collect();
        let paths = paths(&text, Layout::Grouped, Kind::Validating);
        assert!(paths.len() > 1, "{paths:?}");
        let mut names = Vec::new();
        for path in &paths {
            let segment = path.strip_prefix("/validate/").unwrap();
            let name = format!("{segment}.validate.{WEBHOOK_DOMAIN}");
            assert!(name.len() <= MAX_RULE_SETS_SEGMENT_BYTES, "{name}");
            names.extend(
                rule_set_names(segment)
                    .unwrap()
                    .into_iter()
                    .map(str::to_owned),
            );
        }
        assert_eq!(names.len(), 40);
    }

    #[test]
    fn rule_set_path_segments() {
        assert_eq!(rule_set_names("a").unwrap(), ["a"]);
        assert_eq!(rule_set_names("b.a").unwrap(), ["b", "a"]);
        assert_eq!(rule_sets_segment(["b", "a"]), "b.a");
        for (bad, error) in [
            ("", PathError::EmptyName),
            ("a..b", PathError::EmptyName),
            (".a", PathError::EmptyName),
            ("a.", PathError::EmptyName),
            ("a.b.a", PathError::Repeated("a".to_owned())),
        ] {
            assert_eq!(rule_set_names(bad), Err(error), "{bad:?}");
        }
        let long = vec!["a"; 127].join(".");
        assert_eq!(long.len(), 253);
        assert!(matches!(rule_set_names(&long), Err(PathError::Repeated(_))));
        let too_long = format!("{long}.b");
        assert_eq!(
            rule_set_names(&too_long),
            Err(PathError::TooLong { bytes: 255 })
        );
    }

    #[test]
    fn service_references_parse() {
        let service: ServiceRef = "policy/kadmit-webhook".parse().unwrap();
        assert_eq!(service.to_string(), "policy/kadmit-webhook");
        assert_eq!(service.port, None);
        for bad in ["kadmit", "a/b:0", "a/b:x", "A/b", "a/b_c", "/b", "a/"] {
            assert!(bad.parse::<ServiceRef>().is_err(), "{bad}");
        }
    }

    #[test]
    fn urls_follow_the_api_server_rules() {
        let url: WebhookUrl = "https://10.0.0.1:8443/".parse().unwrap();
        assert_eq!(url.as_str(), "https://10.0.0.1:8443");
        // kadmit serve routes at the root: a path before /validate is a 404.
        let err = "https://10.0.0.1:8443/kadmit/"
            .parse::<WebhookUrl>()
            .unwrap_err();
        assert!(err.to_string().contains("without a path"), "{err}");
        for bad in [
            "http://x",
            "https://",
            "https://x?a=b",
            "https://x#f",
            "https://u@x/",
            "https://:443",
            "https://x y",
        ] {
            assert!(bad.parse::<WebhookUrl>().is_err(), "{bad}");
        }
    }

    #[test]
    fn ca_bundles_must_be_certificates_only() {
        let err = check_ca_bundle(b"not pem").unwrap_err();
        assert!(err.to_string().contains("no PEM certificate"), "{err}");
        let key = b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        let err = check_ca_bundle(key).unwrap_err();
        assert!(err.to_string().contains("private key"), "{err}");
    }

    #[test]
    fn dns_labels() {
        assert!(is_dns_label("pod-security"));
        assert!(is_dns_label(&"a".repeat(63)));
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
    }
}
