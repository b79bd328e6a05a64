//! Synthetic rule sets for measurements: many rules over many resources,
//! with a realistic share on pods. Used by `benches/evaluate.rs` and
//! `examples/reload_bench.rs`, so both measure the same rules.

/// Rules per rule set (and per file).
pub const RULES_PER_SET: usize = 100;
/// Custom resources the non-pod rules are spread over.
const RESOURCES: usize = 200;
/// One rule in twenty matches pods, as in a cluster-wide pod policy that also
/// covers many custom resources.
const POD_RULE_EVERY: usize = 20;

/// The rule text of synthetic rule `i`, indented for `spec.rules`; `tag`
/// starts every message, so two versions of a rule set differ only there.
///
/// Pod rules read labels, annotations and containers; the others read fields
/// of `res{N}.example.com` objects. The shapes rotate through equality, regex,
/// `forEach` with a quantity, `in` with a namespace glob, and a mutation, with
/// a share of `Warn` and `Audit` actions. None of them fires on the pod
/// fixture except the mutations, so the review is admitted, as most are.
fn rule(i: usize, tag: &str) -> String {
    if i.is_multiple_of(POD_RULE_EVERY) {
        let shape = (i / POD_RULE_EVERY) % 5;
        match shape {
            0 => format!(
                "    - name: pod-team-{i}
      match: {{resources: [pods]}}
      deny:
        - path: \"$.object.metadata.labels['team-{i}']\"
          equals: blocked-{i}
          message: '{tag}team {i} is blocked from {{{{ $.object.metadata.namespace }}}}'
"
            ),
            1 => format!(
                "    - name: pod-image-{i}
      match: {{resources: [pods], excludeNamespaces: [kube-system]}}
      deny:
        - forEach: \"$.podSpec['containers','initContainers'][*]\"
          deny:
            - path: $.image
              matches: '^(docker\\.io/)?banned{i}/[a-z0-9-]+(:[a-z0-9.-]+)?$'
              message: '{tag}container {{{{ $.name }}}} uses banned image {{{{ $.image }}}}'
"
            ),
            2 => format!(
                "    - name: pod-memory-{i}
      match: {{resources: [pods]}}
      action: Warn
      deny:
        - forEach: $.podSpec.containers[*]
          deny:
            - path: $.resources.limits.memory
              greaterThan: {}Gi
              message: '{tag}container {{{{ $.name }}}} asks for {{{{ $.resources.limits.memory }}}}'
",
                64 + i
            ),
            3 => format!(
                "    - name: pod-tier-{i}
      match: {{resources: [pods], namespaces: [default, 'team-{i}-*']}}
      action: Audit
      deny:
        - path: \"$.object.metadata.annotations['policy.example.com/tier-{i}']\"
          in: [forbidden, legacy]
          message: '{tag}tier {{{{ $.object.metadata.annotations }}}} is retired'
"
            ),
            _ => format!(
                "    - name: pod-label-{i}
      match: {{resources: [pods]}}
      mutate:
        - setIfAbsent: {{path: \"$.object.metadata.labels['synthetic.example.com/r{i}']\", value: 'true'}}
"
            ),
        }
    } else {
        let resource = format!("res{}.example.com", i % RESOURCES);
        let action = match i % 7 {
            3 => "\n      action: Warn",
            5 => "\n      action: Audit",
            _ => "",
        };
        match i % 5 {
            0 => format!(
                "    - name: enabled-{i}
      match: {{resources: [{resource}]}}{action}
      deny:
        - {{path: $.object.spec.enabled{}, equals: true, message: '{tag}feature {} is off'}}
",
                i % 7,
                i % 7
            ),
            1 => format!(
                "    - name: name-{i}
      match: {{resources: [{resource}]}}{action}
      deny:
        - path: $.object.metadata.name
          notMatches: '^(app|svc){i}-[a-z0-9-]{{1,40}}$'
          message: '{tag}name {{{{ $.object.metadata.name }}}} does not follow the convention'
"
            ),
            2 => format!(
                "    - name: size-{i}
      match: {{resources: [{resource}], excludeNamespaces: [kube-*]}}{action}
      deny:
        - forEach: $.object.spec.items[*]
          deny:
            - {{path: $.size, greaterThan: {}Gi, message: '{tag}item {{{{ $.name }}}} is too large'}}
",
                i % 50 + 1
            ),
            3 => format!(
                "    - name: mode-{i}
      match: {{resources: [{resource}], namespaces: ['team-*']}}{action}
      deny:
        - path: $.object.spec.mode
          in: [legacy-{i}, unsafe]
          message: '{tag}mode {{{{ $.object.spec.mode }}}} is not allowed'
"
            ),
            _ => format!(
                "    - name: default-{i}
      match: {{resources: [{resource}]}}
      mutate:
        - setIfAbsent: {{path: $.object.spec.defaults.r{i}, value: {i}}}
"
            ),
        }
    }
}

/// Rule set number `set` of `count` synthetic rules in all (rules
/// `set * RULES_PER_SET ..`), as one YAML document; `tag` starts every message.
pub fn rule_set(set: usize, count: usize, tag: &str) -> String {
    let mut text = format!(
        "apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata:
  name: synthetic-{set}
spec:
  rules:
"
    );
    for i in set * RULES_PER_SET..count.min((set + 1) * RULES_PER_SET) {
        text.push_str(&rule(i, tag));
    }
    text
}

/// `count` synthetic rules as one multi-document file, every message starting
/// with `tag`.
#[allow(dead_code)] // not every bench that includes this module uses it
pub fn rules(count: usize, tag: &str) -> String {
    (0..count.div_ceil(RULES_PER_SET))
        .map(|set| format!("---\n{}", rule_set(set, count, tag)))
        .collect()
}
