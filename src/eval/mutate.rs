//! Running the mutating rules on a copy of the object until a pass changes
//! nothing, recording the JSON Patch operations as it goes.

use std::borrow::Cow;

use serde_json::Value;

use super::EvalError;
use super::condition::holds;
use super::document::{Document, Scope};
use crate::patch::{Editor, Overwrite, Token, resolve};
use crate::plan::{Edit, GuardedEdit, JsonPath, Plan, Root, Source, WritePath};

/// The outcome of the mutating rules.
pub struct Mutated {
    /// The final object.
    pub object: Value,
    /// The operations from the original object to `object`.
    pub editor: Editor,
    /// Rules that changed something, in plan order.
    pub rules: Vec<u32>,
}

/// Applies the `rules` (plan indices, in order) to `object` until a pass
/// changes nothing; at most one pass more than there are rules.
pub fn run(
    plan: &Plan,
    rules: &[u32],
    base: &Document<'_>,
    mut object: Value,
) -> Result<Mutated, EvalError> {
    let mut editor = Editor::new();
    let mut changed_rules: Vec<u32> = Vec::new();
    let max_passes = rules.len() + 1;
    let mut pass = 0;
    loop {
        pass += 1;
        let mut changed_this_pass = Vec::new();
        for &number in rules {
            let Some(rule) = plan.rule(number) else {
                continue;
            };
            let applies = {
                let document = base.with_object(&object);
                rule.matcher
                    .match_objects(document.object, document.old_object)
                    .is_ok()
                    && rule.when.iter().all(|p| holds(p, Scope::top(&document)))
            };
            if !applies {
                continue;
            }
            let before = editor.len();
            for edit in &rule.mutations {
                apply(edit, &mut object, base, None, &mut editor);
            }
            if editor.len() > before {
                changed_this_pass.push(number);
            }
        }
        if changed_this_pass.is_empty() {
            changed_rules.sort_unstable();
            changed_rules.dedup();
            return Ok(Mutated {
                object,
                editor,
                rules: changed_rules,
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
        changed_rules.extend(&changed_this_pass);
    }
}

/// What an edit will write, computed while the object is only read.
enum Pending<'p> {
    Set(Vec<Vec<Token>>, Cow<'p, Value>, Overwrite),
    Merge(Vec<Vec<Token>>, &'p Value),
    Inject(Vec<Vec<Token>>, &'p [String], &'p Value),
    ForEach(Vec<Vec<Token>>, &'p [GuardedEdit]),
}

fn apply<'p>(
    guarded: &'p GuardedEdit,
    object: &mut Value,
    base: &Document<'_>,
    element: Option<&[Token]>,
    editor: &mut Editor,
) {
    let pending = {
        let document = base.with_object(object);
        let element_value = match element {
            Some(location) => match resolve(object, location) {
                Some(value) => Some(value),
                None => return, // the element is gone
            },
            None => None,
        };
        let elements: Vec<&Value> = element_value.into_iter().collect();
        let scope = Scope {
            document: &document,
            elements: &elements,
        };
        if !guarded.when.iter().all(|p| holds(p, scope)) {
            return;
        }
        let targets = |target: &WritePath| -> Vec<Vec<Token>> {
            let mut locations = locate(&target.prefix, &document, element, object);
            for location in &mut locations {
                location.extend(target.tail.iter().cloned());
            }
            locations
        };
        // Literals are borrowed from the plan; only copied values are cloned.
        let value_of = |source: &'p Source| -> Option<Cow<'p, Value>> {
            match source {
                Source::Value(value) => Some(Cow::Borrowed(value)),
                Source::Path(path) => scope.first(path).cloned().map(Cow::Owned),
            }
        };
        match &guarded.edit {
            Edit::SetIfAbsent { target, source } => match value_of(source) {
                Some(value) => Pending::Set(targets(target), value, Overwrite::Never),
                None => return,
            },
            Edit::Set { target, source } => match value_of(source) {
                Some(value) => Pending::Set(targets(target), value, Overwrite::WhenDifferent),
                None => return,
            },
            Edit::MergeIfAbsent { target, value } => Pending::Merge(targets(target), value),
            Edit::InjectIfMissing {
                target,
                keys,
                value,
            } => Pending::Inject(targets(target), keys, value),
            Edit::ForEach { path, edits } => {
                Pending::ForEach(locate(path, &document, element, object), edits)
            }
        }
    };
    match pending {
        Pending::Set(locations, value, overwrite) => {
            for location in locations {
                editor.set(object, &location, &value, overwrite);
            }
        }
        Pending::Merge(locations, value) => {
            for location in locations {
                editor.merge(object, &location, value);
            }
        }
        Pending::Inject(locations, keys, value) => {
            for location in locations {
                editor.inject(object, &location, keys, value);
            }
        }
        Pending::ForEach(locations, edits) => {
            for location in locations {
                for edit in edits {
                    apply(edit, object, base, Some(&location), editor);
                }
            }
        }
    }
}

/// Object-rooted locations of everything `path` selects.
fn locate(
    path: &JsonPath,
    document: &Document<'_>,
    element: Option<&[Token]>,
    object: &Value,
) -> Vec<Vec<Token>> {
    let base: Vec<Token> = match path.root() {
        Root::Object => Vec::new(),
        Root::PodSpec => match document.pod_spec_location() {
            Some(keys) => keys.iter().map(|k| Token::Key((*k).to_owned())).collect(),
            None => return Vec::new(),
        },
        Root::Element => match element {
            Some(location) => location.to_vec(),
            None => return Vec::new(),
        },
        _ => return Vec::new(),
    };
    let Some(root) = resolve(object, &base) else {
        return Vec::new();
    };
    let mut locations = Vec::new();
    path.locate(root, &base, &mut locations);
    locations
}
