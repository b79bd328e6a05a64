//! Running the mutating rules on a copy of the object until a pass changes
//! nothing, recording the JSON Patch operations as it goes.

use std::borrow::Cow;
use std::cell::OnceCell;

use serde_json::Value;

use super::EvalError;
use super::condition::holds;
use super::document::{Document, Frame};
use super::reads::{Base, Reads};
use crate::patch::{Editor, Overwrite, Token, resolve};
use crate::plan::{Edit, GuardedEdit, JsonPath, Plan, ReadKind, Root, Source, WritePath};

/// The outcome of the mutating rules.
pub struct Mutated {
    /// The final object.
    pub object: Value,
    /// The operations from the original object to `object`.
    pub editor: Editor,
    /// Rules that changed something, in plan order.
    pub rules: Vec<u32>,
    /// Passes made over the rules.
    pub passes: usize,
}

/// Applies the `rules` (plan indices, in order) to `object` until a pass
/// changes nothing, or until what a pass read shows that another one would
/// change nothing (see [`super::reads`]); at most one pass more than there
/// are edits. With `patch`, the editor also keeps each value written, for
/// the JSON Patch.
pub fn run(
    plan: &Plan,
    rules: &[u32],
    base: &Document<'_>,
    mut object: Value,
    patch: bool,
) -> Result<Mutated, EvalError> {
    let mut editor = if patch {
        Editor::new()
    } else {
        Editor::without_patch()
    };
    let mut changed_rules: Vec<u32> = Vec::new();
    // Each pass that is not the last fires an edit that could not fire
    // before (every edit but `set` only adds), so a chain through the
    // edits, even within one rule, settles within a pass per edit and one
    // to confirm; writes that undo each other stop here, or at the budget.
    let edits: usize = rules
        .iter()
        .filter_map(|&number| plan.rule(number))
        .map(|rule| edit_count(&rule.mutations))
        .sum();
    let max_passes = edits.max(rules.len()) + 1;
    let mut pass = 0;
    loop {
        pass += 1;
        let mut reads = Reads::new(base.pod_spec_location());
        let mut changed_this_pass = Vec::new();
        for &number in rules {
            let budget = base.budget();
            if !budget.charge(1) {
                break;
            }
            let Some(rule) = plan.rule(number) else {
                continue;
            };
            if let Some(selector) = &rule.matcher.object_selector {
                for key in selector.keys() {
                    reads.label(key, editor.len());
                }
            }
            reads.predicates(&rule.when, None, editor.len());
            let applies = rule.matcher.match_objects(&object, base.old_object).is_ok()
                && (rule.when.is_empty() || {
                    let document = base.with_object(&object);
                    let frame = Frame::top(&document);
                    super::condition::first_failing_guard(rule.when.guards(), frame).is_none()
                        && rule.when.own().iter().all(|p| holds(p, frame))
                });
            if !applies {
                continue;
            }
            let before = editor.len();
            for edit in &rule.mutations {
                if budget.exceeded().is_some() {
                    break;
                }
                apply(edit, &mut object, base, None, &mut editor, &mut reads);
            }
            if editor.len() > before {
                changed_this_pass.push(number);
            }
        }

        if let Some(exceeded) = base.budget().exceeded() {
            return Err(EvalError::OverBudget(exceeded));
        }
        let settled = changed_this_pass.is_empty()
            || !reads.need_another_pass(&editor, &object, base.budget());
        changed_rules.extend(&changed_this_pass);
        if settled {
            changed_rules.sort_unstable();
            changed_rules.dedup();
            return Ok(Mutated {
                object,
                editor,
                rules: changed_rules,
                passes: pass,
            });
        }
        if pass >= max_passes {
            let names: Vec<String> = changed_this_pass
                .iter()
                .filter_map(|n| plan.rule(*n))
                .map(|rule| format!("{}/{}", rule.rule_set_name, rule.name))
                .collect();
            return Err(EvalError::NotConverged {
                passes: pass,
                rules: names.join(", "),
            });
        }
    }
}

/// What a `valueFrom` copies: the value found, unless it is null, which
/// counts as absent (as it does at a `setIfAbsent` target), so nothing is
/// written.
fn copied<'p>(found: Option<&Value>) -> Option<Cow<'p, Value>> {
    found
        .filter(|value| !value.is_null())
        .map(|value| Cow::Owned(value.clone()))
}

/// The edits in `edits`, counting those of each `forEach` (not the
/// `forEach` itself).
fn edit_count(edits: &[GuardedEdit]) -> usize {
    edits
        .iter()
        .map(|guarded| match &guarded.edit {
            Edit::ForEach { edits, .. } => edit_count(edits),
            _ => 1,
        })
        .sum()
}

/// What an edit will write, computed while the object is only read.
enum Pending<'p> {
    Set(Vec<Vec<Token>>, Cow<'p, Value>, Overwrite, Option<usize>),
    Merge(Vec<Vec<Token>>, &'p Value),
    Inject(Vec<Vec<Token>>, &'p [String], &'p Value),
    ForEach(Vec<Vec<Token>>, &'p [GuardedEdit]),
}

/// A `forEach` element: where it is, and its base for recorded reads.
#[derive(Clone, Copy)]
struct Element<'l> {
    location: &'l [Token],
    base: Base,
}

fn apply<'p>(
    guarded: &'p GuardedEdit,
    object: &mut Value,
    base: &Document<'_>,
    element: Option<Element<'_>>,
    editor: &mut Editor,
    reads: &mut Reads<'p>,
) {
    let element_base = element.map(|e| e.base);
    let after = editor.len();
    reads.predicates(&guarded.when, element_base, after);
    let location = element.map(|e| e.location);
    let pending = {
        // Built only for an edit that reads through it (a `when`, a
        // `valueFrom`): most edits only locate their targets.
        let document = OnceCell::new();
        let element_value = match location {
            Some(location) => match resolve(object, location) {
                Some(value) => Some(value),
                None => return, // the element is gone
            },
            None => None,
        };
        let element_slot: [&Value; 1];
        let elements: &[&Value] = match element_value {
            Some(value) => {
                element_slot = [value];
                &element_slot
            }
            None => &[],
        };
        let frame = || Frame {
            document: document.get_or_init(|| base.with_object(object)),
            elements,
        };
        if !guarded.when.iter().all(|p| holds(p, frame())) {
            return;
        }
        let targets = |target: &'p WritePath, reads: &mut Reads<'p>| -> Vec<Vec<Token>> {
            reads.path(&target.prefix, ReadKind::Shape, element_base, after);
            locate(&target.prefix, &target.tail, base, location, object)
        };
        match &guarded.edit {
            Edit::SetIfAbsent { target, source } => {
                let locations = targets(target, reads);
                // Literals are borrowed from the plan; only copied values are cloned.
                let (value, read) = match source {
                    Source::Value(value) => (Some(Cow::Borrowed(value)), None),
                    Source::Path(path) => (
                        copied(frame().first(path)),
                        reads.path(path, ReadKind::Value, element_base, after),
                    ),
                };
                match value {
                    Some(value) => Pending::Set(locations, value, Overwrite::Never, read),
                    None => {
                        // Nothing to copy now; another pass needs to look
                        // again only if something writes the source later
                        // and a target is still missing.
                        reads.guard(read, locations);
                        return;
                    }
                }
            }
            Edit::Set { target, source } => {
                // `set` replaces values, which can undo what earlier reads saw.
                reads.untracked();
                let value = match source {
                    Source::Value(value) => Some(Cow::Borrowed(value)),
                    Source::Path(path) => copied(frame().first(path)),
                };
                match value {
                    Some(value) => Pending::Set(
                        targets(target, reads),
                        value,
                        Overwrite::WhenDifferent,
                        None,
                    ),
                    None => return,
                }
            }
            Edit::MergeIfAbsent { target, value } => Pending::Merge(targets(target, reads), value),
            Edit::InjectIfMissing {
                target,
                keys,
                value,
            } => Pending::Inject(targets(target, reads), keys, value),
            Edit::ForEach { path, edits } => {
                reads.path(path, ReadKind::Shape, element_base, after);
                Pending::ForEach(locate(path, &[], base, location, object), edits)
            }
        }
    };
    // Every write is checked against the size budget at once, so no run of
    // writes (a copy into each of thousands of elements, a copy of a large
    // value each pass) can grow the object far past it.
    let budget = base.budget();
    let within = |editor: &Editor| budget.charge(1) && budget.added(editor.added_bytes());
    match pending {
        Pending::Set(locations, value, overwrite, read) => {
            for location in &locations {
                editor.set(object, location, &value, overwrite);
                if !within(editor) {
                    return;
                }
            }
            reads.guard(read, locations);
        }
        Pending::Merge(locations, value) => {
            for location in locations {
                editor.merge(object, &location, value);
                if !within(editor) {
                    return;
                }
            }
        }
        Pending::Inject(locations, keys, value) => {
            for location in locations {
                editor.inject(object, &location, keys, value);
                if !within(editor) {
                    return;
                }
            }
        }
        Pending::ForEach(locations, edits) => {
            for location in locations {
                if !budget.charge(1) {
                    return;
                }
                let element = Element {
                    location: &location,
                    base: reads.element(&location),
                };
                for edit in edits {
                    apply(edit, object, base, Some(element), editor, reads);
                }
            }
        }
    }
}

/// Object-rooted locations of everything `path` selects, each followed by
/// `tail`.
fn locate(
    path: &JsonPath,
    tail: &[Token],
    document: &Document<'_>,
    element: Option<&[Token]>,
    object: &Value,
) -> Vec<Vec<Token>> {
    let base: &[Token] = match path.root() {
        Root::Object => &[],
        Root::PodSpec => match document.pod_spec_location() {
            Some(tokens) => tokens,
            None => return Vec::new(),
        },
        Root::Element => match element {
            Some(location) => location,
            None => return Vec::new(),
        },
        _ => return Vec::new(),
    };
    let Some(root) = resolve(object, base) else {
        return Vec::new();
    };
    if !document.budget().afford_query(path, root) {
        return Vec::new();
    }
    let mut locations = Vec::new();
    path.locate(root, base, tail, &mut locations);
    document
        .budget()
        .charge(1 + u64::try_from(locations.len()).unwrap_or(u64::MAX));
    locations
}

#[cfg(test)]
mod tests {
    //! The fixpoint: whatever a later write changes for an earlier read, the
    //! result is what running the rules again would give, and a pass whose
    //! reads no later write reached is not repeated.
    use super::*;
    use crate::eval::budget::{Budget, Limits};
    use crate::eval::document::RequestValue;
    use crate::review::{Request, decode};
    use serde_json::json;

    fn fixture_request() -> Request {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/admission-reviews/create-pod.json"
        );
        let body = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        decode(&body)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .request
    }

    /// Runs every mutating rule of `plan` that the request matches on
    /// `object`; returns the result and the budget steps it took.
    fn mutate_counted(plan: &Plan, object: Value) -> (Mutated, u64) {
        let request = fixture_request();
        let rules: Vec<u32> = plan
            .candidates(
                crate::plan::Mode::Mutate,
                &crate::plan::RequestKey::of(&request),
            )
            .into_iter()
            .filter(|&n| plan.rule(n).is_some_and(|r| !r.mutations.is_empty()))
            .collect();
        let request_value = RequestValue::new(&request, plan.request_fields());
        let budget = Budget::new(Limits::DEFAULT);
        let base = Document::new(&request_value, &Value::Null, &Value::Null, &budget);
        let mutated = run(plan, &rules, &base, object, true).unwrap_or_else(|e| panic!("{e}"));
        (mutated, budget.steps())
    }

    /// Runs every mutating rule of `plan` that the request matches on `object`.
    fn mutate(plan: &Plan, object: Value) -> Mutated {
        mutate_counted(plan, object).0
    }

    fn bundled_plan() -> Plan {
        let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/rules"));
        crate::plan::compile(&crate::rules::load_dir(dir).expect("rules"))
            .unwrap_or_else(|d| panic!("{d}"))
    }

    fn fixture_object() -> Value {
        fixture_request()
            .object
            .as_ref()
            .expect("object")
            .to_value()
            .expect("json")
    }

    /// Asserts that running the rules again changes nothing.
    fn assert_fixpoint(plan: &Plan, mutated: &Mutated) {
        let again = mutate(plan, mutated.object.clone());
        assert!(
            again.editor.is_empty(),
            "a further pass changed {:?}",
            again.editor.operations_from(0)
        );
    }

    /// Runs `rules` (a rule list, see `test_plan`) on `object`, checks that
    /// running them again changes nothing, and returns the result and the
    /// number of passes it took.
    fn settle(rules: &str, object: Value) -> (Value, usize) {
        let plan = crate::plan::test_plan(rules);
        let mutated = mutate(&plan, object);
        assert_fixpoint(&plan, &mutated);
        (mutated.object, mutated.passes)
    }

    #[test]
    fn the_bundled_rules_settle_a_pod_in_one_pass() {
        let plan = bundled_plan();
        let object = fixture_object();
        let mutated = mutate(&plan, object);
        assert_eq!(mutated.editor.len(), 7, "the fixture gets seven additions");
        assert_eq!(mutated.passes, 1, "nothing read was written later");
        assert_fixpoint(&plan, &mutated);
    }

    #[test]
    fn the_work_of_the_bundled_rules_grows_linearly_with_the_containers() {
        // Every write is compared with the reads on its way only, so a pod
        // with twenty times the containers costs twenty times the steps (it
        // was every write with every read: 20,000 containers took 21 s).
        let plan = bundled_plan();
        let steps = |containers: usize| {
            let mut object = fixture_object();
            object["spec"]["containers"] = (0..containers)
                .map(|i| json!({"name": format!("c{i}"), "image": "app:1"}))
                .collect();
            let (mutated, steps) = mutate_counted(&plan, object);
            assert_eq!(
                mutated.editor.len(),
                3 * containers + 4,
                "three writes per container"
            );
            steps
        };
        let (small, large) = (steps(1_000), steps(20_000));
        assert!(
            large <= small * 21,
            "1,000 containers: {small} steps; 20,000: {large} steps"
        );
        assert!(large < Limits::DEFAULT.max_steps / 4, "{large} steps");
    }

    #[test]
    fn a_value_copied_before_it_was_written_is_copied_in_a_second_pass() {
        let (object, passes) = settle(
            r#"
    - name: copy
      match: {resources: [pods]}
      mutate:
        - setIfAbsent: {path: $.object.spec.b, valueFrom: {path: $.object.spec.a}}
    - name: write
      match: {resources: [pods]}
      mutate:
        - setIfAbsent: {path: $.object.spec.a, value: 1}
"#,
            json!({"metadata": {}, "spec": {}}),
        );
        assert_eq!(object["spec"], json!({"a": 1, "b": 1}));
        assert_eq!(passes, 2);
    }

    #[test]
    fn a_copy_whose_target_was_filled_later_needs_no_second_pass() {
        let (object, passes) = settle(
            r#"
    - name: copy
      match: {resources: [pods]}
      mutate:
        - setIfAbsent: {path: $.object.spec.b, valueFrom: {path: $.object.spec.a}}
        - setIfAbsent: {path: $.object.spec.b, value: 2}
        - setIfAbsent: {path: $.object.spec.a, value: 1}
"#,
            json!({"metadata": {}, "spec": {}}),
        );
        assert_eq!(object["spec"], json!({"a": 1, "b": 2}));
        assert_eq!(passes, 1);
    }

    #[test]
    fn a_label_written_later_brings_in_a_rule_with_that_selector() {
        let (object, passes) = settle(
            r#"
    - name: selected
      match:
        resources: [pods]
        objectSelector: {matchLabels: {tier: web}}
      mutate:
        - setIfAbsent: {path: $.object.spec.selected, value: true}
    - name: label
      match: {resources: [pods]}
      mutate:
        - setIfAbsent: {path: "$.object.metadata.labels.tier", value: web}
"#,
            json!({"metadata": {"labels": {}}, "spec": {}}),
        );
        assert_eq!(object["spec"]["selected"], json!(true));
        assert_eq!(passes, 2);

        // A label the selector does not look at does not repeat the pass.
        let (object, passes) = settle(
            r#"
    - name: selected
      match:
        resources: [pods]
        objectSelector: {matchLabels: {tier: web}}
      mutate:
        - setIfAbsent: {path: $.object.spec.selected, value: true}
    - name: label
      match: {resources: [pods]}
      mutate:
        - setIfAbsent: {path: "$.object.metadata.labels.team", value: a}
"#,
            json!({"metadata": {"labels": {}}, "spec": {}}),
        );
        assert_eq!(object["spec"].get("selected"), None);
        assert_eq!(passes, 1);
    }

    #[test]
    fn a_condition_written_later_is_looked_at_again() {
        let (object, passes) = settle(
            r#"
    - name: guarded
      match: {resources: [pods]}
      mutate:
        - setIfAbsent: {path: $.object.spec.z, value: 1}
          when:
            - {path: $.object.spec.flag, equals: true}
    - name: flag
      match: {resources: [pods]}
      when:
        - {path: $.object.spec.off, absent: true}
      mutate:
        - setIfAbsent: {path: $.object.spec.flag, value: true}
"#,
            json!({"metadata": {}, "spec": {}}),
        );
        assert_eq!(object["spec"], json!({"flag": true, "z": 1}));
        assert_eq!(passes, 2);
    }

    #[test]
    fn an_injected_container_gets_the_defaults_of_an_earlier_for_each() {
        let (object, passes) = settle(
            r#"
    - name: defaults
      match: {resources: [pods]}
      mutate:
        - forEach: "$.podSpec.containers[*]"
          mutate:
            - setIfAbsent: {path: $.imagePullPolicy, value: IfNotPresent}
    - name: sidecar
      match: {resources: [pods]}
      mutate:
        - injectIfMissing:
            path: $.podSpec.containers
            key: name
            value: {name: side, image: side:1}
"#,
            json!({"metadata": {}, "spec": {"containers": [{"name": "app"}]}}),
        );
        assert_eq!(
            object["spec"]["containers"],
            json!([
                {"name": "app", "imagePullPolicy": "IfNotPresent"},
                {"name": "side", "image": "side:1", "imagePullPolicy": "IfNotPresent"}
            ])
        );
        assert_eq!(passes, 2);
    }

    #[test]
    fn a_list_created_later_is_visited_by_an_earlier_for_each() {
        let (object, passes) = settle(
            r#"
    - name: visit
      match: {resources: [pods]}
      mutate:
        - forEach: "$.object.spec.items[*]"
          mutate:
            - setIfAbsent: {path: $.seen, value: true}
    - name: create
      match: {resources: [pods]}
      mutate:
        - setIfAbsent: {path: $.object.spec.items, value: [{}]}
"#,
            json!({"metadata": {}}),
        );
        assert_eq!(object["spec"]["items"], json!([{"seen": true}]));
        assert_eq!(passes, 2);
    }

    #[test]
    fn a_set_edit_is_always_confirmed_by_another_pass() {
        let (object, passes) = settle(
            r#"
    - name: overwrite
      match: {resources: [pods]}
      mutate:
        - set: {path: $.object.spec.mode, value: strict}
"#,
            json!({"metadata": {}, "spec": {"mode": "lax"}}),
        );
        assert_eq!(object["spec"]["mode"], json!("strict"));
        assert_eq!(passes, 2);
    }
}
