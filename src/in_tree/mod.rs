//! Rules compiled to the API server's in-tree admission policies, so the
//! same rules (and their tests) can be enforced by the API server itself:
//! a rule's deny entries become a ValidatingAdmissionPolicy and its
//! binding, its mutations a MutatingAdmissionPolicy and its binding.
//!
//! Both kinds of policy of a rule share:
//!
//! - `matchConstraints`: the rule's operations and resources, its object
//!   selector, its rule set's namespace selector;
//! - `matchConditions`: what `match` checks besides those (namespaces,
//!   users and groups, as globs), then every `when` guard, the rule set's
//!   `matchConditions` included, each written as CEL
//!   ([`expression`]).
//!
//! A ValidatingAdmissionPolicy has one validation per deny entry (each
//! entry inside a `forEach` one of its own, iterating the elements),
//! `!(violation)`, with the entry's message (placeholders shown as `…`:
//! the API server renders no templates; line breaks as spaces), its
//! `messageExpression` when that reads no `forEach` element, and the
//! reason of the rule's `code`; its binding's `validationActions` are the
//! rule's `action`. A MutatingAdmissionPolicy
//! has one `JSONPatch` mutation per edit ([`mutation`]), for CREATE and
//! UPDATE, reinvoked when another mutation changed the object.
//!
//! What has no translation (image parts, quantities, some paths, some
//! conditions inside `forEach`, policies past the size the API server
//! stores) is reported per rule with the reason; those rules stay in the
//! webhook. What translates with a difference the API server cannot avoid
//! (a status code it has no reason for, a message it cannot compute) is
//! reported per rule too, in [`Policy::differences`], as is what the API
//! server's order of mutating policies and its single reinvocation can
//! change ([`crate::mutation_order`]: a rule reading what another writes after reading
//! what a third writes; two rules whose writes' result depends on which
//! runs first).

pub mod expression;
pub mod mutating_api;
pub mod mutation;

use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use serde::Serialize;

use crate::cel::Variable;
use crate::plan::{CompiledRule, DenyCheck, Glob, Matcher, Plan};
use crate::review::Operation;
use crate::rules::Action;
use expression::{Translator, Untranslatable, string};
use mutating_api::{
    JsonPatch, MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding,
    MutatingAdmissionPolicyBindingSpec, MutatingAdmissionPolicySpec, Mutation,
};

/// The bounds the generated expressions stay within: written by kadmit
/// from compiled rules, they nest deeper than people write (a path step is
/// a `filter` and a `map`), and are bounded by the rule files' own bounds.
/// The API server's CEL parser refuses an expression of more than 100,000
/// characters (cel-go's `ExpressionSizeCodePointLimit`, which Kubernetes
/// keeps), so no longer one is written.
pub const GENERATED_BOUNDS: crate::cel::Bounds = crate::cel::Bounds {
    source_bytes: 100_000,
    nodes: 50_000,
    source_nesting: 256,
    depth: 1024,
    loop_nesting: 32,
};

/// One rule as in-tree policies: a validating one for its deny entries, a
/// mutating one for its mutations.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The rule set.
    pub rule_set: Arc<str>,
    /// The rule.
    pub rule: Arc<str>,
    /// Its deny entries, when it has some.
    pub validating: Option<Validating>,
    /// Its mutations, when it has some.
    pub mutating: Option<Mutating>,
    /// How the API server's answers differ from kadmit's beyond what every
    /// policy shares (placeholders): a status code, a message.
    pub differences: Vec<String>,
}

/// A ValidatingAdmissionPolicy and its binding.
#[derive(Debug, Clone)]
pub struct Validating {
    /// The policy.
    pub policy: ValidatingAdmissionPolicy,
    /// Its binding.
    pub binding: ValidatingAdmissionPolicyBinding,
}

/// A MutatingAdmissionPolicy and its binding.
#[derive(Debug, Clone)]
pub struct Mutating {
    /// The policy.
    pub policy: MutatingAdmissionPolicy,
    /// Its binding.
    pub binding: MutatingAdmissionPolicyBinding,
}

/// A rule with no in-tree form, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Untranslated {
    /// The rule set.
    pub rule_set: Arc<str>,
    /// The rule.
    pub rule: Arc<str>,
    /// Why.
    pub reason: String,
}

/// The policies of a plan.
#[derive(Debug, Clone, Default)]
pub struct Policies {
    /// The rules that translate, in plan order.
    pub policies: Vec<Policy>,
    /// The rules that do not.
    pub untranslated: Vec<Untranslated>,
}

/// The most bytes of CEL the policies of one plan hold in all. A rule's
/// CEL can be tens of times the size of its YAML (each `$.podSpec` is four
/// places, each path step a `filter` and a `map`), so rule files within
/// their own bounds could otherwise make gigabytes of output; the bundled
/// rules make about 0.4 MiB.
pub const GENERATED_TOTAL_BYTES: usize = 64 << 20;

/// The most bytes one policy object may be, as JSON: etcd stores objects
/// of at most 1.5 MiB, and the API server refuses a larger one while its
/// binding (a separate object) applies. Its CEL and messages are charged
/// against it as they are written, so a rule past it stops being built.
pub const POLICY_OBJECT_BYTES: usize = 1 << 20;

/// The most `matchConditions` a policy may have (the API's limit); a rule
/// with more has the last ones joined with `&&` into one.
pub const MAX_MATCH_CONDITIONS: usize = 64;

/// The in-tree policies of `plan`'s rules.
pub fn policies(plan: &Plan) -> Policies {
    policies_within(plan, GENERATED_TOTAL_BYTES)
}

/// [`policies`], holding at most `total_bytes` of CEL: once a rule's would
/// pass that, it and every rule after it are left in the webhook, with
/// the reason, without building any more CEL.
fn policies_within(plan: &Plan, total_bytes: usize) -> Policies {
    let mut out = Policies::default();
    let mut written = 0usize;
    let mut reached = false;
    // The translated mutating rules, with their policy's index.
    let mut mutating: Vec<(usize, &CompiledRule)> = Vec::new();
    for rule in plan.rules() {
        let untranslated = |reason: String| Untranslated {
            rule_set: rule.rule_set_name.clone(),
            rule: rule.name.clone(),
            reason,
        };
        if reached {
            out.untranslated.push(untranslated(format!(
                "the policies of the rules before it reached the {total_bytes} bytes of CEL \
                 written for one rules directory; move rules to another directory to translate \
                 them"
            )));
            continue;
        }
        let mut room = Room::new(total_bytes.saturating_sub(written), total_bytes);
        match policy(plan, rule, &mut room) {
            Ok(policy) => {
                written += cel_bytes(&policy);
                if policy.mutating.is_some() {
                    mutating.push((out.policies.len(), rule));
                }
                out.policies.push(policy);
            }
            Err(Untranslatable(reason)) => {
                reached = room.total_reached;
                out.untranslated.push(untranslated(reason));
            }
        }
    }
    let rules: Vec<&CompiledRule> = mutating.iter().map(|(_, rule)| *rule).collect();
    for note in crate::mutation_order::notes(&rules) {
        if let Some(policy) = mutating
            .get(note.rule)
            .and_then(|(index, _)| out.policies.get_mut(*index))
        {
            policy.differences.push(note.text);
        }
    }
    out
}

/// What a rule's policies may still hold: each policy object at most
/// [`POLICY_OBJECT_BYTES`] of CEL and messages, all of them what is left
/// of the plan's bound. Charged as each expression is written, so that a
/// translation stops at a bound instead of building all first.
struct Room {
    /// Bytes charged to the policy object being built.
    object: usize,
    /// Bytes charged to all of the rule's policies.
    total: usize,
    /// What is left of the plan's bound.
    left: usize,
    /// The plan's bound, for the reason.
    bound: usize,
    /// Set when the plan's bound stopped the translation.
    total_reached: bool,
}

/// Why a rule whose `kind` would hold `bytes` is not translated.
fn over_object(kind: &str, bytes: usize) -> Untranslatable {
    Untranslatable(format!(
        "its {kind} would hold over {bytes} bytes of CEL and messages, more than the \
         {POLICY_OBJECT_BYTES} bytes the API server stores in one object; split the rule, or \
         shorten its paths (each union and `$.podSpec` multiplies the CEL)"
    ))
}

impl Room {
    fn new(left: usize, bound: usize) -> Self {
        Room {
            object: 0,
            total: 0,
            left,
            bound,
            total_reached: false,
        }
    }

    /// Starts a policy object holding `conditions` (its match
    /// conditions, charged again: each object holds them).
    fn start_object(
        &mut self,
        kind: &str,
        conditions: &[MatchCondition],
    ) -> Result<(), Untranslatable> {
        self.object = 0;
        self.charge(
            kind,
            conditions
                .iter()
                .map(|c| c.name.len() + c.expression.len())
                .sum(),
        )
    }

    /// Charges `bytes` to the `kind` object being built.
    fn charge(&mut self, kind: &str, bytes: usize) -> Result<(), Untranslatable> {
        self.object = self.object.saturating_add(bytes);
        self.total = self.total.saturating_add(bytes);
        if self.object > POLICY_OBJECT_BYTES {
            return Err(over_object(kind, self.object));
        }
        if self.total > self.left {
            self.total_reached = true;
            return Err(Untranslatable(format!(
                "its CEL would take the policies past the {} bytes of CEL written for one \
                 rules directory; move rules to another directory to translate them",
                self.bound
            )));
        }
        Ok(())
    }
}

/// The bytes of CEL (and messages) in a rule's policies.
fn cel_bytes(policy: &Policy) -> usize {
    let conditions =
        |list: &[MatchCondition]| list.iter().map(|c| c.expression.len()).sum::<usize>();
    let validating = policy
        .validating
        .as_ref()
        .and_then(|v| v.policy.spec.as_ref())
        .map_or(0, |spec| {
            conditions(spec.match_conditions.as_deref().unwrap_or_default())
                + spec
                    .validations
                    .iter()
                    .flatten()
                    .map(|v| v.expression.len() + v.message.as_ref().map_or(0, String::len))
                    .sum::<usize>()
        });
    let mutating = policy.mutating.as_ref().map_or(0, |m| {
        conditions(&m.policy.spec.match_conditions)
            + m.policy
                .spec
                .mutations
                .iter()
                .map(|m| m.json_patch.expression.len())
                .sum::<usize>()
    });
    validating + mutating
}

/// The name of a rule's policies and bindings.
pub fn policy_name(rule_set: &str, rule: &str) -> String {
    format!("{rule_set}.{rule}.kadmit.dev")
}

fn policy(plan: &Plan, rule: &CompiledRule, room: &mut Room) -> Result<Policy, Untranslatable> {
    let mut translator = Translator::default();
    let mut conditions = request_conditions(&rule.matcher)?;
    // Charged to each policy object as it starts; summed here as well, so
    // that a rule whose conditions alone are past the bound stops early.
    let mut condition_bytes = 0usize;
    for (i, predicate) in rule.when.iter().enumerate() {
        let expression = expression::sized(translator.condition(predicate)?)?;
        condition_bytes += expression.len();
        if condition_bytes > POLICY_OBJECT_BYTES {
            return Err(over_object("match conditions", condition_bytes));
        }
        conditions.push(MatchCondition {
            name: format!("when-{i}"),
            expression,
        });
    }
    let conditions = at_most_64(conditions)?;
    let name = policy_name(&rule.rule_set_name, &rule.name);
    let mut differences = Vec::new();
    // The policies' failurePolicy is Fail: a failing match condition of a
    // set under Ignore, which skips the rule in kadmit, rejects there.
    if rule.when.iter().any(|predicate| {
        matches!(predicate, crate::plan::Predicate::Cel(check)
            if check.match_condition.is_some_and(|of| !of.fail))
    }) {
        differences.push(
            "a matchConditions expression of a rule set under failurePolicy: Ignore that fails \
             skips the rule in kadmit, and rejects the request under the policy's \
             failurePolicy: Fail"
                .to_owned(),
        );
    }
    let validating = match rule.deny.is_empty() {
        true => None,
        false => Some(validating(
            plan,
            rule,
            &name,
            conditions.clone(),
            &mut translator,
            room,
            &mut differences,
        )?),
    };
    let mutating = match rule.mutations.is_empty() {
        true => None,
        false => Some(mutating(plan, rule, &name, conditions, room)?),
    };
    // Every expression is compiled once all are written within the
    // bounds: compiling is what costs (a rule file of 140 KB whose rules
    // were each compiled whole before their size was looked at took 12
    // minutes in a debug build; 2 seconds once they stop at the bound).
    let validating_expressions = validating
        .iter()
        .filter_map(|v| v.policy.spec.as_ref())
        .flat_map(|spec| {
            spec.match_conditions
                .iter()
                .flatten()
                .map(|c| &c.expression)
                .chain(spec.validations.iter().flatten().map(|v| &v.expression))
        });
    for expression in validating_expressions {
        compiles(expression)?;
    }
    for validation in validating
        .iter()
        .filter_map(|v| v.policy.spec.as_ref())
        .flat_map(|spec| spec.validations.iter().flatten())
    {
        if let Some(message) = &validation.message_expression {
            compiles(message)?;
        }
    }
    if let Some(mutating) = &mutating {
        for condition in &mutating.policy.spec.match_conditions {
            compiles(&condition.expression)?;
        }
        for mutation in &mutating.policy.spec.mutations {
            // Only what the equivalence test can evaluate is written.
            crate::cel::Expression::compile_patch(
                &mutation.json_patch.expression,
                GENERATED_BOUNDS,
            )
            .map_err(|e| Untranslatable(format!("its JSONPatch expression: {e}")))?;
        }
    }
    object_size(
        "ValidatingAdmissionPolicy",
        validating.as_ref().map(|v| &v.policy),
    )?;
    object_size(
        "MutatingAdmissionPolicy",
        mutating.as_ref().map(|m| &m.policy),
    )?;
    Ok(Policy {
        rule_set: rule.rule_set_name.clone(),
        rule: rule.name.clone(),
        validating,
        mutating,
        differences,
    })
}

/// `conditions`, at most [`MAX_MATCH_CONDITIONS`] of them: past that, the
/// last ones joined into one with `&&`, which the API server treats as it
/// treats a list (false when one is false, even if another fails; failed
/// when one fails and none is false; true when all are true).
fn at_most_64(mut conditions: Vec<MatchCondition>) -> Result<Vec<MatchCondition>, Untranslatable> {
    if conditions.len() <= MAX_MATCH_CONDITIONS {
        return Ok(conditions);
    }
    let rest = conditions.split_off(MAX_MATCH_CONDITIONS - 1);
    let (first, last) = match (rest.first(), rest.last()) {
        (Some(first), Some(last)) => (first.name.clone(), last.name.clone()),
        _ => return Ok(conditions),
    };
    // Each on lines of its own: a `//` comment in a rule's CEL ends with
    // its line.
    let joined: Vec<String> = rest
        .into_iter()
        .map(|c| format!("(\n{}\n)", c.expression))
        .collect();
    conditions.push(MatchCondition {
        name: format!("{first}-to-{last}"),
        expression: expression::sized(joined.join(" && ")).map_err(|Untranslatable(reason)| {
            Untranslatable(format!(
                "its match conditions past the {MAX_MATCH_CONDITIONS} a policy may have, joined \
                 into one: {reason}"
            ))
        })?,
    });
    Ok(conditions)
}

/// Refuses a policy object larger, as JSON, than the API server stores.
fn object_size<T: Serialize>(kind: &str, object: Option<&T>) -> Result<(), Untranslatable> {
    let Some(object) = object else {
        return Ok(());
    };
    let bytes = serde_json::to_vec(object)
        .map_err(|e| Untranslatable(format!("its {kind} does not serialize: {e}")))?
        .len();
    if bytes > POLICY_OBJECT_BYTES {
        return Err(Untranslatable(format!(
            "its {kind} would be {bytes} bytes, more than the {POLICY_OBJECT_BYTES} bytes the \
             API server stores in one object; split the rule"
        )));
    }
    Ok(())
}

fn validating(
    plan: &Plan,
    rule: &CompiledRule,
    name: &str,
    conditions: Vec<MatchCondition>,
    translator: &mut Translator,
    room: &mut Room,
    differences: &mut Vec<String>,
) -> Result<Validating, Untranslatable> {
    const KIND: &str = "ValidatingAdmissionPolicy";
    room.start_object(KIND, &conditions)?;
    let (reason, code_note) = status_reason(rule.code);
    differences.extend(code_note);
    let mut validations = Vec::new();
    for check in &rule.deny {
        for (violation, entry) in translator.violations(check)? {
            let expression = expression::sized(format!("!({violation})"))?;
            let message = format!(
                "{}/{}: {}",
                rule.rule_set_name,
                rule.name,
                message_text(entry)
            );
            let message_expression = message_expression(entry, &message, differences);
            room.charge(
                KIND,
                expression.len()
                    + message.len()
                    + message_expression.as_ref().map_or(0, String::len),
            )?;
            validations.push(Validation {
                expression,
                message: Some(message),
                message_expression,
                reason: Some(reason.to_owned()),
            });
        }
    }
    if validations.is_empty() {
        // Only `forEach`es with no entries: no violation, ever.
        validations.push(Validation {
            expression: "true".to_owned(),
            message: Some(format!("{}/{}: denied", rule.rule_set_name, rule.name)),
            message_expression: None,
            reason: Some(reason.to_owned()),
        });
    }
    let operations: Vec<Operation> = Operation::ALL
        .iter()
        .copied()
        .filter(|operation| rule.matcher.has_operation(*operation))
        .collect();
    let policy = ValidatingAdmissionPolicy {
        metadata: metadata(name),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some("Fail".to_owned()),
            match_conditions: (!conditions.is_empty()).then_some(conditions),
            match_constraints: Some(match_resources(plan, rule, &operations)),
            validations: Some(validations),
            ..ValidatingAdmissionPolicySpec::default()
        }),
        status: None,
    };
    let action = match rule.action {
        Action::Deny => "Deny",
        Action::Warn => "Warn",
        Action::Audit => "Audit",
    };
    let binding = ValidatingAdmissionPolicyBinding {
        metadata: metadata(name),
        spec: ValidatingAdmissionPolicyBindingSpec {
            policy_name: name.to_owned(),
            validation_actions: vec![action.to_owned()],
            match_resources: None,
            param_ref: None,
        },
    };
    Ok(Validating { policy, binding })
}

/// The validation `reason` of a rule's status code (the API server answers
/// with the reason's code; without one it would answer 422 Invalid), and
/// the difference when the code has none.
fn status_reason(code: u16) -> (&'static str, Option<String>) {
    match code {
        401 => ("Unauthorized", None),
        403 => ("Forbidden", None),
        413 => ("RequestEntityTooLarge", None),
        422 => ("Invalid", None),
        other => (
            "Forbidden",
            Some(format!(
                "its status code {other} has no ValidatingAdmissionPolicy reason (those are 401 \
                 Unauthorized, 403 Forbidden, 413 RequestEntityTooLarge and 422 Invalid): the \
                 API server denies with 403 Forbidden"
            )),
        ),
    }
}

/// A deny entry's `messageExpression`, when the API server can evaluate it
/// as kadmit does: one that reads no `forEach` element (a policy's
/// `messageExpression` sees only `object`, `oldObject` and `request`).
/// Otherwise the difference is noted: the API server shows `message`.
fn message_expression(
    entry: &DenyCheck,
    message: &str,
    differences: &mut Vec<String>,
) -> Option<String> {
    let DenyCheck::Entry {
        message_expression: Some(check),
        ..
    } = entry
    else {
        return None;
    };
    let source = check.expression.source();
    let reads_element = check
        .expression
        .variables()
        .any(|variable| matches!(variable, Variable::Element | Variable::Binding(_)));
    if reads_element {
        differences.push(format!(
            "the messageExpression at {} reads a forEach element, which a policy's \
             messageExpression cannot: the API server shows {message:?} instead",
            check.at
        ));
        return None;
    }
    // Of type `string` there, as the API server requires (an expression
    // that reads `object` is `dyn`), and still an error for a value that
    // is no string, when both show `message`.
    Some(format!("(\n{source}\n) + ''"))
}

fn mutating(
    plan: &Plan,
    rule: &CompiledRule,
    name: &str,
    conditions: Vec<MatchCondition>,
    room: &mut Room,
) -> Result<Mutating, Untranslatable> {
    const KIND: &str = "MutatingAdmissionPolicy";
    // A DELETE has no object to patch (kadmit writes nothing either); a
    // CONNECT's object is the options of a subresource.
    if rule.matcher.has_operation(Operation::Connect)
        && rule
            .matcher
            .resources
            .iter()
            .any(|resources| resources.resources.iter().any(|(_, sub)| !sub.is_empty()))
    {
        return Err(Untranslatable(
            "it mutates the options of CONNECT requests, which kadmit writes no \
             MutatingAdmissionPolicy for"
                .to_owned(),
        ));
    }
    let operations: Vec<Operation> = [Operation::Create, Operation::Update]
        .into_iter()
        .filter(|operation| rule.matcher.has_operation(*operation))
        .collect();
    if operations.is_empty() {
        return Err(Untranslatable(
            "it matches no CREATE or UPDATE, the requests with an object to patch".to_owned(),
        ));
    }
    room.start_object(KIND, &conditions)?;
    let mut mutations = Vec::new();
    for expression in mutation::expressions(&rule.mutations, &mut |bytes| room.charge(KIND, bytes))?
    {
        mutations.push(Mutation {
            patch_type: "JSONPatch".to_owned(),
            json_patch: JsonPatch { expression },
        });
    }
    let policy = MutatingAdmissionPolicy {
        metadata: metadata(name),
        spec: MutatingAdmissionPolicySpec {
            failure_policy: "Fail".to_owned(),
            match_conditions: conditions,
            match_constraints: match_resources(plan, rule, &operations),
            mutations,
            // Another policy or webhook may write what this one reads, as
            // kadmit's passes over its rules allow for.
            reinvocation_policy: "IfNeeded".to_owned(),
        },
    };
    let binding = MutatingAdmissionPolicyBinding {
        metadata: metadata(name),
        spec: MutatingAdmissionPolicyBindingSpec {
            policy_name: name.to_owned(),
        },
    };
    Ok(Mutating { policy, binding })
}

/// The requests a rule's policy is for: its operations (as given) and
/// resources, its object selector, its rule set's namespace selector.
fn match_resources(plan: &Plan, rule: &CompiledRule, operations: &[Operation]) -> MatchResources {
    let namespace_selector = plan
        .rule_sets()
        .get(rule.rule_set.0 as usize)
        .and_then(|info| info.namespace_selector.as_ref())
        .map(crate::webhook::label_selector);
    MatchResources {
        match_policy: Some("Equivalent".to_owned()),
        namespace_selector: Some(namespace_selector.unwrap_or_default()),
        object_selector: Some(
            rule.matcher
                .object_selector
                .as_ref()
                .map(|selector| crate::webhook::label_selector(selector.selector()))
                .unwrap_or_default(),
        ),
        resource_rules: Some(resource_rules(&rule.matcher, operations)),
        exclude_resource_rules: None,
    }
}

/// Refuses `expression` when it does not compile within
/// [`GENERATED_BOUNDS`] (a target 60 keys deep nests too far): every
/// validation and match condition written is one the equivalence test can
/// evaluate, and a translation that broke a rule's own CEL is reported
/// instead of written.
fn compiles(expression: &str) -> Result<(), Untranslatable> {
    crate::cel::Expression::compile_within(expression, &[], GENERATED_BOUNDS)
        .map(drop)
        .map_err(|e| Untranslatable(format!("its CEL expression: {e}")))
}

fn metadata(name: &str) -> meta::ObjectMeta {
    meta::ObjectMeta {
        name: Some(name.to_owned()),
        labels: Some(
            [
                ("app.kubernetes.io/name".to_owned(), "kadmit".to_owned()),
                (
                    "app.kubernetes.io/component".to_owned(),
                    "admission-policy".to_owned(),
                ),
            ]
            .into(),
        ),
        ..meta::ObjectMeta::default()
    }
}

/// A deny entry's message, placeholders shown as `…`, line breaks as
/// spaces (the API server refuses a message with line breaks), trimmed.
fn message_text(check: &DenyCheck) -> String {
    match check {
        DenyCheck::Entry { message, .. } => message
            .text_with_placeholders("…")
            .replace(['\r', '\n'], " ")
            .trim()
            .to_owned(),
        // `Translator::violations` gives entries only.
        DenyCheck::ForEach { .. } => "denied".to_owned(),
    }
}

fn resource_rules(matcher: &Matcher, operations: &[Operation]) -> Vec<NamedRuleWithOperations> {
    let operations: Vec<String> = operations
        .iter()
        .map(|operation| operation.as_str().to_owned())
        .collect();
    matcher
        .resources
        .iter()
        .map(|resources| NamedRuleWithOperations {
            api_groups: Some(resources.groups.clone()),
            api_versions: Some(resources.versions.clone()),
            operations: Some(operations.clone()),
            resources: Some(
                resources
                    .resources
                    .iter()
                    .map(|(resource, sub)| {
                        if sub.is_empty() {
                            resource.clone()
                        } else {
                            format!("{resource}/{sub}")
                        }
                    })
                    .collect(),
            ),
            resource_names: None,
            scope: Some(crate::webhook::scope_name(resources.scope).to_owned()),
        })
        .collect()
}

/// The namespace, user and group globs of `match`, as match conditions.
fn request_conditions(matcher: &Matcher) -> Result<Vec<MatchCondition>, Untranslatable> {
    type Condition = fn(&[Glob]) -> Result<String, Untranslatable>;
    let namespace: Condition = |list| {
        Ok(format!(
            "(has(request.namespace) && request.namespace != '' && {})",
            globs(list, "request.namespace")?
        ))
    };
    let user: Condition = |list| globs(list, "request.userInfo.username");
    let group: Condition = |list| {
        Ok(format!(
            "(has(request.userInfo.groups) && request.userInfo.groups.exists(g, {}))",
            globs(list, "g")?
        ))
    };
    // Each list and its exclusion: the condition holds, then its negation.
    [
        ("namespaces", &matcher.namespaces, namespace, ""),
        (
            "exclude-namespaces",
            &matcher.exclude_namespaces,
            namespace,
            "!",
        ),
        ("users", &matcher.users, user, ""),
        ("exclude-users", &matcher.exclude_users, user, "!"),
        ("groups", &matcher.groups, group, ""),
        ("exclude-groups", &matcher.exclude_groups, group, "!"),
    ]
    .into_iter()
    .filter(|(_, list, _, _)| !list.is_empty())
    .map(|(name, list, condition, negation)| {
        Ok(MatchCondition {
            name: name.to_owned(),
            expression: expression::sized(format!("{negation}{}", condition(list)?))?,
        })
    })
    .collect()
}

fn globs(list: &[Glob], value: &str) -> Result<String, Untranslatable> {
    let parts: Result<Vec<String>, Untranslatable> = list
        .iter()
        .map(|glob| {
            Ok(match glob {
                Glob::Exact(text) => format!("{value} == {}", string(text)),
                Glob::Prefix(prefix) => format!("{value}.startsWith({})", string(prefix)),
                Glob::Suffix(suffix) => format!("{value}.endsWith({})", string(suffix)),
                Glob::Any => "true".to_owned(),
                // Written by kadmit (escaped literals, `.`, `.*`), which
                // RE2 reads alike; checked all the same.
                Glob::Pattern(pattern) => format!(
                    "{value}.matches({})",
                    string(expression::re2_pattern(pattern.as_str())?)
                ),
            })
        })
        .collect();
    Ok(format!("({})", parts?.join(" || ")))
}

/// The policies and bindings as one YAML stream, with a header naming the
/// rules left in the webhook.
pub fn to_yaml(policies: &Policies) -> Result<String, serde_yaml::Error> {
    let mut out = String::from(
        "# Generated by `kadmit policies`: change the rule files and regenerate\n\
         # rather than editing this file.\n",
    );
    for untranslated in &policies.untranslated {
        out.push_str(&format!(
            "# not translated, stays in the webhook: {}/{}: {}\n",
            untranslated.rule_set,
            untranslated.rule,
            one_line(&untranslated.reason)
        ));
    }
    for policy in &policies.policies {
        for difference in &policy.differences {
            out.push_str(&format!(
                "# translated, but differs from the webhook: {}/{}: {}\n",
                policy.rule_set,
                policy.rule,
                one_line(difference)
            ));
        }
    }
    for policy in &policies.policies {
        if let Some(validating) = &policy.validating {
            out.push_str("---\n");
            out.push_str(&with_type(&validating.policy, "ValidatingAdmissionPolicy")?);
            out.push_str("---\n");
            out.push_str(&with_type(
                &validating.binding,
                "ValidatingAdmissionPolicyBinding",
            )?);
        }
        if let Some(mutating) = &policy.mutating {
            out.push_str("---\n");
            out.push_str(&with_type(&mutating.policy, "MutatingAdmissionPolicy")?);
            out.push_str("---\n");
            out.push_str(&with_type(
                &mutating.binding,
                "MutatingAdmissionPolicyBinding",
            )?);
        }
    }
    Ok(out)
}

/// `text` with its line breaks as spaces, to stay in a YAML comment.
fn one_line(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
}

/// An API object as YAML with its `apiVersion` and `kind` first.
fn with_type<T: Serialize>(object: &T, kind: &str) -> Result<String, serde_yaml::Error> {
    let mut value = serde_yaml::to_value(object)?;
    if let serde_yaml::Value::Mapping(map) = &mut value {
        let mut typed = serde_yaml::Mapping::new();
        typed.insert(
            "apiVersion".into(),
            "admissionregistration.k8s.io/v1".into(),
        );
        typed.insert("kind".into(), kind.into());
        for (key, item) in std::mem::take(map) {
            if key.as_str() != Some("apiVersion") && key.as_str() != Some("kind") {
                typed.insert(key, item);
            }
        }
        *map = typed;
    }
    serde_yaml::to_string(&value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_read_through_the_fields_the_api_server_declares() {
        let rule = |path: &str| {
            format!(
                "    - name: r\n      match: {{resources: [configmaps]}}\n      deny:\n        - path: \"{path}\"\n          equals: x\n          message: m\n"
            )
        };
        // `request` is an object type there: `'operation' in request` and
        // `request['operation']` do not compile, so fields are selected.
        for (path, selected) in [
            ("$.request.operation", "[dyn(request.operation)]"),
            ("$.request.kind.kind", "[dyn(request.kind.kind)]"),
            (
                "$.request.userInfo.groups[0]",
                "[dyn(request.userInfo.groups)]",
            ),
            (
                "$.request.userInfo.extra['example.com/team'][*]",
                "[dyn(request.userInfo.extra)]",
            ),
        ] {
            let plan = crate::plan::test_plan(&rule(path));
            let translated = policies(&plan);
            assert!(translated.untranslated.is_empty(), "{path}");
            let validating = translated.policies[0].validating.as_ref().unwrap();
            let expression = serde_json::to_string(&validating.policy).unwrap();
            assert!(expression.contains(selected), "{path}: {expression}");
            assert!(!expression.contains("in request"), "{path}: {expression}");
        }
        // Not declared there: the review's uid, its objects under request.
        for (path, reason) in [
            ("$.request.uid", "request has no field \"uid\""),
            ("$.request.object.kind", "request has no field \"object\""),
            ("$.request.kind", "request.kind is an object"),
            (
                "$.request.userInfo.nickname",
                "request.userInfo has no field",
            ),
        ] {
            let plan = crate::plan::test_plan(&rule(path));
            let translated = policies(&plan);
            assert!(translated.policies.is_empty(), "{path}");
            let found = &translated.untranslated[0].reason;
            assert!(found.contains(reason), "{path}: {found}");
        }
    }

    #[test]
    fn paths_that_would_make_cel_without_bound_stay_in_the_webhook() {
        let reason = |rule: &str| {
            let plan = crate::plan::test_plan(rule);
            let translated = policies(&plan);
            assert!(translated.policies.is_empty(), "{rule}");
            translated.untranslated[0].reason.clone()
        };
        // Each union doubles the CEL: 2^40 copies, stopped as the size
        // passes the bound (it used to run out of memory at 26).
        let unions = "['a','b']".repeat(40);
        for rule in [
            format!(
                "    - name: r\n      match: {{resources: [configmaps]}}\n      deny:\n        - path: \"$.object.data{unions}\"\n          exists: true\n          message: m\n"
            ),
            format!(
                "    - name: r\n      match: {{resources: [configmaps]}}\n      mutate:\n        - set: {{path: \"$.object.data{unions}\", value: 1}}\n"
            ),
        ] {
            let found = reason(&rule);
            assert!(found.contains("bytes, over the 100000"), "{found}");
        }
        // As many steps as a path may take: each nests the CEL once more
        // (thousands used to take cubic time, then overflow the stack).
        for rule in [
            format!(
                "    - name: r\n      match: {{resources: [configmaps]}}\n      deny:\n        - path: \"$.object.data{}\"\n          exists: true\n          message: m\n",
                "[*]".repeat(crate::plan::MAX_PATH_STEPS - 1)
            ),
            format!(
                "    - name: r\n      match: {{resources: [configmaps]}}\n      mutate:\n        - setIfAbsent: {{path: $.object.data{}, value: 1}}\n",
                ".a".repeat(crate::plan::MAX_PATH_STEPS - 1)
            ),
        ] {
            let found = reason(&rule);
            assert!(found.contains("over the 64 translated"), "{found}");
        }
    }

    #[test]
    fn the_rules_past_the_total_bound_stay_in_the_webhook() {
        let rule = |name: &str| {
            format!(
                "    - name: {name}\n      match: {{resources: [pods]}}\n      deny:\n        - path: $.object.metadata.name\n          in: [a]\n          message: listed\n"
            )
        };
        let plan = crate::plan::test_plan(&[rule("one"), rule("two"), rule("six")].concat());
        let all = policies(&plan);
        assert_eq!(all.policies.len(), 3);
        let each = cel_bytes(&all.policies[0]);
        assert!(each > 0);
        // Names of one length: each rule's CEL is as long as the others'.
        // Room for two: the third is left out, naming the bound.
        let bounded = policies_within(&plan, 2 * each + each / 2);
        assert_eq!(bounded.policies.len(), 2);
        let [left] = bounded.untranslated.as_slice() else {
            panic!("{:?}", bounded.untranslated);
        };
        assert_eq!(&*left.rule, "six");
        assert!(
            left.reason
                .contains(&format!("past the {} bytes", 2 * each + each / 2)),
            "{}",
            left.reason
        );
        // Exactly at the bound, all three fit.
        assert_eq!(policies_within(&plan, 3 * each).policies.len(), 3);
    }

    #[test]
    fn a_rule_whose_expression_would_be_too_large_stays_in_the_webhook() {
        let values: Vec<String> = (0..20_000).map(|i| format!("\"v{i}\"")).collect();
        let plan = crate::plan::test_plan(&format!(
            "    - name: huge
      match: {{resources: [pods]}}
      deny:
        - path: $.object.metadata.name
          in: [{}]
          message: listed
    - name: small
      match: {{resources: [pods]}}
      deny:
        - path: $.object.metadata.name
          in: [a]
          message: listed
",
            values.join(", ")
        ));
        let policies = policies(&plan);
        assert_eq!(policies.policies.len(), 1);
        assert_eq!(&*policies.policies[0].rule, "small");
        let [untranslated] = policies.untranslated.as_slice() else {
            panic!("{:?}", policies.untranslated);
        };
        assert_eq!(&*untranslated.rule, "huge");
        assert!(
            untranslated.reason.contains("bytes, over the 100000"),
            "{}",
            untranslated.reason
        );
    }

    /// The match conditions of `policy`'s validating policy.
    fn match_conditions(policy: &Policy) -> &[MatchCondition] {
        policy
            .validating
            .as_ref()
            .and_then(|v| v.policy.spec.as_ref())
            .and_then(|spec| spec.match_conditions.as_deref())
            .expect("match conditions")
    }

    fn validations(policy: &Policy) -> &[Validation] {
        policy
            .validating
            .as_ref()
            .and_then(|v| v.policy.spec.as_ref())
            .and_then(|spec| spec.validations.as_deref())
            .expect("validations")
    }

    #[test]
    fn a_rule_past_the_size_of_one_policy_object_stays_in_the_webhook_unbuilt() {
        // Forty entries of about 50 KB of CEL each: the policy would be
        // 2 MB, which the API server refuses to store (etcd's 1.5 MiB).
        let entry = |i: usize| {
            format!(
                "        - path: \"$.object.data{}.x{i}\"\n          exists: true\n          message: m{i}\n",
                "['a','b']".repeat(7)
            )
        };
        let entries: String = (0..40).map(entry).collect();
        let plan = crate::plan::test_plan(&format!(
            "    - name: big\n      match: {{resources: [configmaps]}}\n      deny:\n{entries}    - name: small\n      match: {{resources: [configmaps]}}\n      deny:\n        - {{path: $.object.data.x, exists: true, message: m}}\n"
        ));
        let translated = policies(&plan);
        let [untranslated] = translated.untranslated.as_slice() else {
            panic!("{:?}", translated.untranslated);
        };
        assert_eq!(&*untranslated.rule, "big");
        assert!(
            untranslated
                .reason
                .contains("more than the 1048576 bytes the API server stores in one object"),
            "{}",
            untranslated.reason
        );
        // Stopped as it passed the bound: the bytes named are those of the
        // entries written so far, not of all twelve.
        let named: usize = untranslated
            .reason
            .split_whitespace()
            .find_map(|word| word.parse().ok())
            .expect("a size");
        assert!(named < POLICY_OBJECT_BYTES + 300_000, "{named}");
        // The next rule, within the bound, translates.
        assert_eq!(translated.policies.len(), 1);
        let json = serde_json::to_vec(&translated.policies[0].validating.as_ref().unwrap().policy)
            .unwrap();
        assert!(json.len() <= POLICY_OBJECT_BYTES);
    }

    #[test]
    fn once_the_total_bound_is_reached_the_rules_after_it_are_not_built() {
        let rule = |name: &str| {
            format!(
                "    - name: {name}\n      match: {{resources: [pods]}}\n      deny:\n        - path: $.object.metadata.name\n          in: [a]\n          message: listed\n"
            )
        };
        // The last rule would not translate (an image part): its reason
        // shows it was never looked at.
        let image = "    - name: img\n      match: {resources: [pods]}\n      deny:\n        - path: \"$.podSpec.containers[*].image\"\n          image: tag\n          in: [latest]\n          message: m\n";
        let plan = crate::plan::test_plan(&[rule("one"), rule("two"), image.to_owned()].concat());
        let each = cel_bytes(&policies(&plan).policies[0]);
        let bounded = policies_within(&plan, each + each / 2);
        assert_eq!(bounded.policies.len(), 1);
        let reasons: Vec<(&str, &str)> = bounded
            .untranslated
            .iter()
            .map(|u| (&*u.rule, u.reason.as_str()))
            .collect();
        let [("two", two), ("img", img)] = reasons.as_slice() else {
            panic!("{reasons:?}");
        };
        assert!(
            two.contains("its CEL would take the policies past"),
            "{two}"
        );
        assert!(
            img.contains("the policies of the rules before it reached"),
            "{img}"
        );
    }

    #[test]
    fn more_than_64_match_conditions_are_joined_into_the_last() {
        // As many as a rule set may have, then two for `match` and one
        // `when`: three too many.
        let conditions: String = (0..64)
            .map(|i| format!("    - {{name: c{i}, expression: \"request.name != 'x{i}'\"}}\n"))
            .collect();
        let loaded = crate::rules::load_str(
            "t.yaml",
            &format!(
                "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata: {{name: t}}\nspec:\n  matchConditions:\n{conditions}  rules:\n    - name: r\n      match: {{resources: [configmaps], namespaces: [\"team-*\"], excludeUsers: [bob]}}\n      when: [{{path: $.object.metadata.labels.w, exists: true}}]\n      deny:\n        - message: denied\n      mutate:\n        - setIfAbsent: {{path: $.object.metadata.labels.a, value: b}}\n"
            ),
        );
        let plan = crate::plan::compile(&loaded).unwrap_or_else(|d| panic!("{d}"));
        let translated = policies(&plan);
        let policy = &translated.policies[0];
        let validating = match_conditions(policy);
        let mutating = &policy
            .mutating
            .as_ref()
            .expect("mutating")
            .policy
            .spec
            .match_conditions;
        for list in [validating, mutating.as_slice()] {
            assert_eq!(list.len(), MAX_MATCH_CONDITIONS);
            // Two for `match`, 61 of the rule set's, then the other 3
            // and the rule's `when`, in one.
            assert_eq!(list[0].name, "namespaces");
            assert_eq!(list[62].name, "when-60");
            let last = &list[63];
            assert_eq!(last.name, "when-61-to-when-64");
            assert_eq!(last.expression.matches("\n) && (\n").count(), 3);
            assert!(
                last.expression.contains("'x63'") && last.expression.contains("'w'"),
                "{}",
                last.expression
            );
        }
    }

    #[test]
    fn messages_lose_their_line_breaks_and_codes_become_reasons() {
        let plan = crate::plan::test_plan(
            "    - name: nl\n      code: 422\n      match: {resources: [configmaps]}\n      deny:\n        - path: $.object.metadata.labels.a\n          exists: true\n          message: \"label a is\\r\\nnot allowed\\n\"\n    - name: plain\n      match: {resources: [configmaps]}\n      deny:\n        - message: denied\n    - name: odd\n      code: 429\n      match: {resources: [configmaps]}\n      deny:\n        - message: slow down\n",
        );
        let translated = policies(&plan);
        let [nl, plain, odd] = translated.policies.as_slice() else {
            panic!("{:?}", translated.untranslated);
        };
        let nl = &validations(nl)[0];
        assert_eq!(nl.message.as_deref(), Some("t/nl: label a is  not allowed"));
        assert_eq!(nl.reason.as_deref(), Some("Invalid"));
        // kadmit's default, 403: without a reason the API server would
        // answer 422.
        assert_eq!(validations(plain)[0].reason.as_deref(), Some("Forbidden"));
        assert!(plain.differences.is_empty(), "{:?}", plain.differences);
        assert_eq!(validations(odd)[0].reason.as_deref(), Some("Forbidden"));
        let [difference] = odd.differences.as_slice() else {
            panic!("{:?}", odd.differences);
        };
        assert!(
            difference.contains("status code 429 has no ValidatingAdmissionPolicy reason")
                && difference.contains("denies with 403 Forbidden"),
            "{difference}"
        );
        for (code, reason) in [(401, "Unauthorized"), (413, "RequestEntityTooLarge")] {
            assert_eq!(status_reason(code), (reason, None));
        }
    }

    #[test]
    fn each_entry_of_a_for_each_is_a_validation_with_its_own_message() {
        let plan = crate::plan::test_plan(
            "    - name: fe\n      match: {resources: [configmaps]}\n      deny:\n        - forEach: $.object.metadata.labels\n          entries: true\n          deny:\n            - {path: $.key, equals: c, message: label c is forbidden}\n            - forEach: \"$.value\"\n              deny:\n                - {path: $, equals: d, message: value d is forbidden}\n        - {path: $.object.metadata.name, equals: e, message: name e is forbidden}\n",
        );
        let translated = policies(&plan);
        let validations = validations(&translated.policies[0]);
        let messages: Vec<&str> = validations
            .iter()
            .filter_map(|v| v.message.as_deref())
            .collect();
        assert_eq!(
            messages,
            [
                "t/fe: label c is forbidden",
                "t/fe: value d is forbidden",
                "t/fe: name e is forbidden"
            ]
        );
        // The first tests only the key, the second only the value.
        assert!(
            validations[0].expression.contains("'c'") && !validations[0].expression.contains("'d'")
        );
        assert!(
            validations[1].expression.contains("'d'") && !validations[1].expression.contains("'c'")
        );
        // An entry is `dyn` there: a map literal's static type would make
        // `type(...) == list` on it refused.
        assert!(
            validations[0].expression.contains("[dyn({'key': "),
            "{}",
            validations[0].expression
        );
    }

    #[test]
    fn a_cel_condition_whose_pattern_re2_reads_otherwise_is_not_translated() {
        let plan = crate::plan::test_plan(
            "    - name: w\n      match: {resources: [configmaps]}\n      deny:\n        - cel: \"object.metadata.name.matches('\\\\\\\\<admin')\"\n          message: m\n",
        );
        let translated = policies(&plan);
        assert!(translated.policies.is_empty());
        let [left] = translated.untranslated.as_slice() else {
            panic!("{:?}", translated.untranslated);
        };
        assert!(left.reason.contains("reads otherwise"), "{}", left.reason);
        let plan = crate::plan::test_plan(
            "    - name: w\n      match: {resources: [configmaps]}\n      deny:\n        - cel: \"object.metadata.name.matches('^admin-')\"\n          message: m\n",
        );
        assert_eq!(policies(&plan).policies.len(), 1);
    }

    #[test]
    fn a_cel_condition_reading_an_undeclared_request_field_stays_in_the_webhook() {
        let rule = |cel: &str| {
            format!(
                "    - name: m\n      match: {{resources: [pods]}}\n      deny:\n        - {{cel: \"{cel}\", message: m}}\n"
            )
        };
        for (cel, named) in [
            ("request.uid == 'x'", "request.uid"),
            (
                "request.userInfo.nickname == 'x'",
                "request.userInfo.nickname",
            ),
        ] {
            let translated = policies(&crate::plan::test_plan(&rule(cel)));
            assert!(translated.policies.is_empty(), "{cel}");
            let reason = &translated.untranslated[0].reason;
            assert!(
                reason.contains(named) && reason.contains("does not declare"),
                "{reason}"
            );
        }
        for cel in [
            "request.userInfo.username == 'x'",
            "request.userInfo.extra['a'][0] == 'x'",
            "request.kind.kind == 'Pod' && request.operation == 'CREATE'",
        ] {
            let translated = policies(&crate::plan::test_plan(&rule(cel)));
            assert!(
                translated.untranslated.is_empty(),
                "{cel}: {:?}",
                translated.untranslated
            );
        }
    }

    #[test]
    fn a_cel_match_condition_is_of_type_bool() {
        // `object.spec.hostNetwork` is `dyn` where the API server checks
        // types, and a match condition must be `bool`.
        let plan = crate::plan::test_plan(
            "    - name: m\n      match: {resources: [pods]}\n      when: [{cel: \"object.spec.hostNetwork\"}, {path: $.object.metadata.name, equals: a}]\n      deny:\n        - {path: $.object.metadata.name, exists: true, message: m}\n",
        );
        let translated = policies(&plan);
        let conditions = match_conditions(&translated.policies[0]);
        let when: Vec<&str> = conditions
            .iter()
            .filter(|c| c.name.starts_with("when-"))
            .map(|c| c.expression.as_str())
            .collect();
        let [cel, path] = when.as_slice() else {
            panic!("{when:?}");
        };
        assert!(
            cel.starts_with("[(\nobject.spec.hostNetwork\n)].all(") && cel.ends_with(")"),
            "{cel}"
        );
        // A path test is written as a boolean already.
        assert!(!path.starts_with("[("), "{path}");
        // So is an `any` or `all` of several; one of a single CEL condition
        // is written as that condition, and wrapped too.
        for (when, wrapped) in [
            ("[{any: [{cel: \"object.spec.hostNetwork\"}]}]", true),
            (
                "[{all: [{all: [{cel: \"object.spec.hostNetwork\"}]}]}]",
                true,
            ),
            (
                "[{any: [{cel: \"object.spec.hostNetwork\"}, {cel: \"object.spec.hostPID\"}]}]",
                false,
            ),
            ("[{not: {cel: \"object.spec.hostNetwork\"}}]", false),
        ] {
            let plan = crate::plan::test_plan(&format!(
                "    - name: m\n      match: {{resources: [pods]}}\n      when: {when}\n      deny:\n        - {{path: $.object.metadata.name, exists: true, message: m}}\n"
            ));
            let translated = policies(&plan);
            let condition = match_conditions(&translated.policies[0])
                .iter()
                .find(|c| c.name == "when-0")
                .unwrap();
            assert_eq!(
                condition.expression.ends_with(".all(kadmit_v1, kadmit_v1)"),
                wrapped,
                "{when}: {}",
                condition.expression
            );
        }
        // It means the same: true for true, false for false, an error for
        // a value that is no boolean.
        for (object, held) in [
            (
                serde_json::json!({"spec": {"hostNetwork": true}}),
                Some(true),
            ),
            (
                serde_json::json!({"spec": {"hostNetwork": false}}),
                Some(false),
            ),
            (serde_json::json!({"spec": {"hostNetwork": "yes"}}), None),
        ] {
            let mut context = cel::Context::default();
            context.add_variable("object", object).unwrap();
            let program = cel::Program::compile(cel).unwrap();
            let value = program.execute(&context);
            match held {
                Some(held) => assert_eq!(value, Ok(cel::Value::Bool(held)), "{cel}"),
                None => assert!(value.is_err(), "{value:?}"),
            }
        }
    }

    #[test]
    fn a_message_expression_translates_unless_it_reads_an_element() {
        let plan = crate::plan::test_plan(
            "    - name: m\n      match: {resources: [configmaps]}\n      deny:\n        - cel: \"has(object.data)\"\n          messageExpression: \"'data: ' + string(size(object.data))\"\n        - forEach: \"$.object.data[*]\"\n          deny:\n            - cel: \"element == 'x'\"\n              messageExpression: \"'bad value ' + element\"\n              message: a bad value\n            - cel: \"element == 'y'\"\n              messageExpression: \"'in ' + object.metadata.name\"\n",
        );
        let translated = policies(&plan);
        let policy = &translated.policies[0];
        let validations = validations(policy);
        assert_eq!(
            validations[0].message_expression.as_deref(),
            Some("(\n'data: ' + string(size(object.data))\n) + ''")
        );
        assert_eq!(validations[1].message_expression, None);
        assert_eq!(validations[1].message.as_deref(), Some("t/m: a bad value"));
        // Reading no element, it means the same at every element.
        assert_eq!(
            validations[2].message_expression.as_deref(),
            Some("(\n'in ' + object.metadata.name\n) + ''")
        );
        let [difference] = policy.differences.as_slice() else {
            panic!("{:?}", policy.differences);
        };
        assert!(
            difference.contains("reads a forEach element")
                && difference.contains("shows \"t/m: a bad value\" instead"),
            "{difference}"
        );
    }
}
