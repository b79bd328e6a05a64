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
//! A ValidatingAdmissionPolicy has one validation per deny entry,
//! `!(violation)`, with the entry's message (placeholders shown as `…`:
//! the API server renders no templates), and its binding's
//! `validationActions` are the rule's `action`. A MutatingAdmissionPolicy
//! has one `JSONPatch` mutation per edit ([`mutation`]), for CREATE and
//! UPDATE, reinvoked when another mutation changed the object.
//!
//! What has no translation (image parts, quantities, some paths, some
//! conditions inside `forEach`) is reported per rule with the reason;
//! those rules stay in the webhook.

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
pub const GENERATED_BOUNDS: crate::cel::Bounds = crate::cel::Bounds {
    source_bytes: 256 << 10,
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

/// The in-tree policies of `plan`'s rules.
pub fn policies(plan: &Plan) -> Policies {
    policies_within(plan, GENERATED_TOTAL_BYTES)
}

/// [`policies`], holding at most `total_bytes` of CEL: the rules after
/// that are left in the webhook, with the reason.
fn policies_within(plan: &Plan, total_bytes: usize) -> Policies {
    let mut out = Policies::default();
    let mut written = 0usize;
    for rule in plan.rules() {
        let translated = policy(plan, rule).and_then(|policy| {
            let bytes = cel_bytes(&policy);
            if written.saturating_add(bytes) > total_bytes {
                return Err(Untranslatable(format!(
                    "its {bytes} bytes of CEL would take the policies past the \
                     {total_bytes} bytes written for one rules directory"
                )));
            }
            written += bytes;
            Ok(policy)
        });
        match translated {
            Ok(policy) => out.policies.push(policy),
            Err(Untranslatable(reason)) => out.untranslated.push(Untranslated {
                rule_set: rule.rule_set_name.clone(),
                rule: rule.name.clone(),
                reason,
            }),
        }
    }
    out
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

fn policy(plan: &Plan, rule: &CompiledRule) -> Result<Policy, Untranslatable> {
    let mut translator = Translator::default();
    let mut conditions = request_conditions(&rule.matcher);
    for (i, predicate) in rule.when.iter().enumerate() {
        conditions.push(MatchCondition {
            name: format!("when-{i}"),
            expression: within_bounds(translator.predicate(predicate)?)?,
        });
    }
    let name = policy_name(&rule.rule_set_name, &rule.name);
    let validating = match rule.deny.is_empty() {
        true => None,
        false => Some(validating(
            plan,
            rule,
            &name,
            conditions.clone(),
            &mut translator,
        )?),
    };
    let mutating = match rule.mutations.is_empty() {
        true => None,
        false => Some(mutating(plan, rule, &name, conditions)?),
    };
    Ok(Policy {
        rule_set: rule.rule_set_name.clone(),
        rule: rule.name.clone(),
        validating,
        mutating,
    })
}

fn validating(
    plan: &Plan,
    rule: &CompiledRule,
    name: &str,
    conditions: Vec<MatchCondition>,
    translator: &mut Translator,
) -> Result<Validating, Untranslatable> {
    let mut validations = Vec::new();
    for check in &rule.deny {
        validations.push(Validation {
            expression: within_bounds(format!("!({})", translator.violation(check)?))?,
            message: Some(format!(
                "{}/{}: {}",
                rule.rule_set_name,
                rule.name,
                message_text(check)
            )),
            message_expression: None,
            reason: None,
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

fn mutating(
    plan: &Plan,
    rule: &CompiledRule,
    name: &str,
    conditions: Vec<MatchCondition>,
) -> Result<Mutating, Untranslatable> {
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
    let mut mutations = Vec::new();
    for expression in mutation::expressions(&rule.mutations)? {
        let expression = expression::sized(expression)?;
        // Only what the equivalence test can evaluate is written.
        crate::cel::Expression::compile_patch(&expression, GENERATED_BOUNDS)
            .map_err(|e| Untranslatable(format!("its JSONPatch expression: {e}")))?;
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

/// `expression`, unless it is longer or deeper than [`GENERATED_BOUNDS`]
/// allow or does not compile: every validation and match condition written
/// is one the equivalence test can evaluate, and a translation that broke
/// a rule's own CEL is reported instead of written.
fn within_bounds(expression: String) -> Result<String, Untranslatable> {
    let expression = expression::sized(expression)?;
    crate::cel::Expression::compile_within(&expression, &[], GENERATED_BOUNDS)
        .map_err(|e| Untranslatable(format!("its CEL expression: {e}")))?;
    Ok(expression)
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

/// A deny entry's message, placeholders shown as `…`; a `forEach`'s, its
/// first entry's.
fn message_text(check: &DenyCheck) -> String {
    match check {
        DenyCheck::Entry { message, .. } => message.text_with_placeholders("…"),
        DenyCheck::ForEach { checks, .. } => checks
            .first()
            .map(message_text)
            .unwrap_or_else(|| "denied".to_owned()),
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
fn request_conditions(matcher: &Matcher) -> Vec<MatchCondition> {
    let namespace: fn(&[Glob]) -> String = |list| {
        format!(
            "(has(request.namespace) && request.namespace != '' && {})",
            globs(list, "request.namespace")
        )
    };
    let user: fn(&[Glob]) -> String = |list| globs(list, "request.userInfo.username");
    let group: fn(&[Glob]) -> String = |list| {
        format!(
            "(has(request.userInfo.groups) && request.userInfo.groups.exists(g, {}))",
            globs(list, "g")
        )
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
    .map(|(name, list, condition, negation)| MatchCondition {
        name: name.to_owned(),
        expression: format!("{negation}{}", condition(list)),
    })
    .collect()
}

fn globs(list: &[Glob], value: &str) -> String {
    let parts: Vec<String> = list
        .iter()
        .map(|glob| match glob {
            Glob::Exact(text) => format!("{value} == {}", string(text)),
            Glob::Prefix(prefix) => format!("{value}.startsWith({})", string(prefix)),
            Glob::Suffix(suffix) => format!("{value}.endsWith({})", string(suffix)),
            Glob::Any => "true".to_owned(),
            Glob::Pattern(pattern) => format!("{value}.matches({})", string(pattern.as_str())),
        })
        .collect();
    format!("({})", parts.join(" || "))
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
            untranslated.rule_set, untranslated.rule, untranslated.reason
        ));
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
            assert!(found.contains("bytes, over the 262144"), "{found}");
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
            untranslated.reason.contains("bytes, over the 262144"),
            "{}",
            untranslated.reason
        );
    }
}
