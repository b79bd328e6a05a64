//! CEL expressions in rule files: `cel:` conditions and `messageExpression`.
//!
//! Expressions are parsed once, when the rules compile, by the `cel` crate
//! (the CEL standard library and its strings extension), with the
//! variables ValidatingAdmissionPolicy gives its expressions: `object`,
//! `oldObject` and `request`, and inside `forEach` entries `element` (the
//! current element) and each name an enclosing entry binds with `as`. A
//! syntax error, an unknown variable or an expression over the size bounds
//! is a diagnostic at the rule file's line.
//!
//! # Cost
//!
//! No expression may hold a worker, so every evaluation is charged to the
//! review's step budget ([`Budget`]) before and while it runs:
//!
//! - before it runs: its node count times the *weight*, `4 × (1 + B / 128)`
//!   steps, where `B` is the size in bytes of the values of the variables
//!   it reads (converting them costs the same order), and 4 is what one
//!   interpreted node costs next to one value a path selects;
//! - each time a comprehension (`all`, `exists`, `exists_one`, `map`,
//!   `filter`) starts: the number of elements it will visit times the node
//!   count of its body times the weight. kadmit expands these macros itself
//!   so that each loop's range passes through a function that charges it;
//!   a loop over the budget fails with an error before it starts;
//! - each time a call makes values whose size is not bounded by its
//!   operands' (`replace`, `split`, `join`), or can be a multiple of them
//!   (`format`, `strings.quote`), before it makes them: a step per byte of
//!   the strings it makes (for `format`, the most its clauses can write) and
//!   [`VALUE_STEPS`] per value, about
//!   what they take in memory. A split of 3 MB into one-character strings
//!   would take 230 MB; a join of many short strings with a long separator
//!   the product of their sizes. A call over the budget fails before it
//!   allocates;
//! - each element of a list or map literal that is not a constant, before
//!   the interpreter copies it into the literal, and each item a `map` or
//!   `filter` appends: what copying it costs, a step per byte of its
//!   strings and [`VALUE_STEPS`] per value. `[object, object, …]` holds a
//!   whole copy of the object per element;
//! - each `+` the rule writes, before it adds: a step per byte of the
//!   strings and bytes it copies and [`VALUE_STEPS`] per element of the
//!   lists and maps (numbers cost nothing more). A sum's result can be
//!   twice as large as its larger operand, so sums of sums inside chained
//!   `map`s grow exponentially with the expression's size: eight chained
//!   `map(x, x + x + … + x)` made 84 MB from a five-byte name;
//! - each value any other call makes (`reverse`, `lowerAscii`,
//!   `substring`, …), once made: a step per byte and [`VALUE_STEPS`] per
//!   value.
//!
//! A value made is an input from then on, as the variables are: it counts
//! in `B`, so each node is charged once more for it and each comprehension
//! starting later by the larger weight ([`spend_made`]).
//!
//! Without loops and sums, what an expression computes is at most its node
//! count times the size of its inputs, and every other operation is linear
//! in its operands, hence the first charge; a loop repeats its body once per
//! element, hence the second, which multiplies for nested loops. For that,
//! kadmit runs the strings extension's `indexOf` and `lastIndexOf` itself
//! (macros expand them into its own functions, as they do `replace`,
//! `split`, `join` and `matches`): the extension's compare the needle at
//! every position. A review over the budget is denied naming the limit,
//! like any other.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use ::cel::common::ast::{
    CallExpr, ComprehensionExpr, Expr, IdedExpr, ListExpr, LiteralValue, operators,
};
use ::cel::common::types::{CelInt, CelNull};
use ::cel::common::value::{CowVal, Val};
use ::cel::parser::{Macro, MacroExprHelper, ParseError};
use ::cel::{Context, Env, ExecutionError, Program};
use serde_json::Value;

use crate::eval::budget::Budget;
use crate::excerpt::{MAX_MESSAGE_BYTES, shown_within};
use crate::plan::{Pattern, RegexProblem};

mod quantity;

/// Longest expression source, in bytes.
pub const MAX_SOURCE_BYTES: usize = 4096;

/// Most nodes in one expression (after its macros are expanded).
pub const MAX_NODES: u64 = 1000;

/// Deepest nesting of comprehensions.
pub const MAX_LOOP_NESTING: usize = 3;

/// Deepest nesting of brackets (`(`, `[`, `{`) and conditionals (`?`) in
/// the source: the parser recurses through a dozen grammar rules for each.
pub const MAX_SOURCE_NESTING: usize = 32;

/// Deepest nesting of the parsed expression (after its macros expand): the
/// interpreter recurses once per level.
pub const MAX_DEPTH: usize = 64;

/// Stack for parsing, whatever the caller's: the parser takes up to about
/// 150 KiB per nesting level in a debug build. Reserved, not committed:
/// only the pages used are.
const PARSE_STACK_BYTES: usize = 64 << 20;

/// Stack an evaluation may need at [`MAX_DEPTH`]; one that finds less left
/// on its thread runs on a segment of [`EVAL_STACK_BYTES`].
const EVAL_RED_ZONE_BYTES: usize = 4 << 20;
const EVAL_STACK_BYTES: usize = 16 << 20;

/// Budget steps one CEL node costs: the interpreter takes about four times
/// as long per node as a path takes per selected value.
const NODE_STEPS: u64 = 4;

/// A node is charged once more for each this many bytes of input: the most
/// a node can do is proportional to the size of the values it works on.
const BYTES_PER_NODE_STEP: u64 = 128;

/// The size and shape bounds an expression is compiled under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Longest source, in bytes.
    pub source_bytes: usize,
    /// Most nodes.
    pub nodes: u64,
    /// Deepest nesting of brackets and conditionals in the source.
    pub source_nesting: usize,
    /// Deepest nesting of the parsed expression.
    pub depth: usize,
    /// Deepest nesting of comprehensions.
    pub loop_nesting: usize,
}

impl Bounds {
    /// The bounds of expressions written in rule files.
    pub const RULE_FILES: Bounds = Bounds {
        source_bytes: MAX_SOURCE_BYTES,
        nodes: MAX_NODES,
        source_nesting: MAX_SOURCE_NESTING,
        depth: MAX_DEPTH,
        loop_nesting: MAX_LOOP_NESTING,
    };
}

/// The function each comprehension's range passes through. `@` cannot be
/// written in CEL source, so no expression can call it by hand.
const RANGE_CHARGE: &str = "@kadmit_range";
/// The function each value the interpreter copies into a list or map passes
/// through, which charges copying it ([`charge_copy`]): the items a `map` or
/// `filter` appends, and the elements of list and map literals that are not
/// constants ([`charge_made_values`]).
const COPY_CHARGE: &str = "@kadmit_copy";
/// The function the result of each call a rule writes passes through, which
/// charges a value the call made ([`charge_made`]): `reverse`,
/// `lowerAscii`, `substring` and the like make values as large as their
/// operands without a charge of their own.
const MADE_CHARGE: &str = "@kadmit_made";
/// `s.replace(from, to[, n])`, expanded by a macro into this function, which
/// charges the result's size before building it.
const REPLACE: &str = "@kadmit_replace";
/// `s.indexOf(t[, from])`, expanded by a macro into this function: the
/// strings extension's `indexOf`, in time linear in the strings (the
/// extension's compares `t` at every position of `s`).
const INDEX_OF: &str = "@kadmit_indexOf";
/// `s.lastIndexOf(t[, from])`, as [`INDEX_OF`] is.
const LAST_INDEX_OF: &str = "@kadmit_lastIndexOf";
/// `s.split(sep[, n])`, expanded by a macro into this function, which
/// charges the parts before making them.
const SPLIT: &str = "@kadmit_split";
/// `list.join([sep])`, expanded by a macro into this function, which
/// charges the string it makes before making it.
const JOIN: &str = "@kadmit_join";
/// `s.format(args)` runs the strings extension's `format` on what this
/// function returns: `s`, once it has charged the most the call can make
/// ([`charge_format`]).
const FORMAT_CHARGE: &str = "@kadmit_format_charge";
/// The loop variable of the one-element loop a `format` call expands into,
/// holding its arguments ([`format`]).
const FORMAT_ARGS: &str = "@format_args";
/// `strings.quote(s)`, expanded by a macro into this function, which
/// charges the quoted string before making it.
const QUOTE: &str = "@kadmit_quote";

/// Steps a call that makes values is charged for each value, besides a
/// step per byte of its strings: about the bytes a value takes in memory
/// apart from its text, so that what a call allocates is charged a step per
/// byte (a `split` into one-character strings allocates some 70 bytes for
/// each byte of its input).
const VALUE_STEPS: u64 = 64;
/// `s.matches(re)` and `matches(s, re)`, expanded by macros into this
/// function, which bounds and charges the regex it compiles.
const MATCHES: &str = "@kadmit_matches";
/// `a + b` as the rule file writes it (see [`charged_add`]).
const ADD: &str = "@kadmit_add";

/// The most a regex `matches` compiles may take (as a rule file's
/// `matches` may, [`crate::plan::MAX_ONE_REGEX_BYTES`]); it is compiled
/// within the smallest size that holds it, which prices its matches.
const MAX_MATCHES_REGEX_BYTES: usize = crate::plan::MAX_ONE_REGEX_BYTES;
/// Steps a `matches` call is charged for each size it tries to compile its
/// regex within, and per byte of its pattern: compiling takes time in the
/// pattern's length (about 3.4 µs a byte for `a?a?…`), which a flat charge
/// would let a pattern from the request multiply.
const MATCHES_COMPILE_STEPS: u64 = 1_000;
/// Steps per byte of a pattern `matches` compiles (a pattern over the
/// bound is charged as the longest it may be, then refused).
const MATCHES_PATTERN_STEPS_PER_BYTE: u64 = 64;
/// The longest pattern `matches` compiles (as in a rule file).
const MAX_MATCHES_PATTERN_BYTES: usize = crate::plan::MAX_REGEX_PATTERN_BYTES;
/// Regexes each thread keeps compiled for `matches`; past it, it starts
/// over.
const MATCHES_KEPT: usize = 16;

thread_local! {
    /// Patterns `matches` compiled at run time, the last [`MATCHES_KEPT`].
    static MATCHES_COMPILED: std::cell::RefCell<HashMap<String, Pattern>> =
        std::cell::RefCell::new(HashMap::new());
    /// The literal patterns of the expression running on this thread,
    /// compiled with the rule files ([`Expression::use_literal_patterns`]).
    static LITERAL_PATTERNS: std::cell::RefCell<Option<LiteralPatterns>> =
        const { std::cell::RefCell::new(None) };
}

/// An expression's literal `matches()` patterns, compiled, by their text.
pub type LiteralPatterns = Arc<HashMap<String, Pattern>>;

/// A variable an expression reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variable {
    /// `object`.
    Object,
    /// `oldObject`.
    OldObject,
    /// `request`.
    Request,
    /// `element`: the element of the innermost `forEach`.
    Element,
    /// A name bound by the `forEach` entry at this depth (0: outermost).
    Binding(usize),
}

/// A compiled CEL expression.
pub struct Expression {
    source: Arc<str>,
    env: Arc<Env>,
    /// The expression as written, which the walks over it read.
    program: Program,
    /// The expression that runs: [`program`](Self::program) with each value
    /// it makes or copies charged ([`charge_made_values`]).
    evaluated: Box<::cel::parser::Expression>,
    nodes: u64,
    variables: Vec<(Arc<str>, Variable)>,
    /// The patterns of `matches()` calls written as string literals.
    literal_patterns: Vec<String>,
    /// Those patterns compiled, when the rule compiler has given them.
    compiled_patterns: Option<LiteralPatterns>,
}

impl std::fmt::Debug for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expression")
            .field("source", &self.source)
            .field("nodes", &self.nodes)
            .finish_non_exhaustive()
    }
}

/// Why an expression did not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CompileError {
    /// What is wrong, with the position in the expression when known.
    pub message: String,
    /// How to fix it.
    pub hint: Option<String>,
}

/// Why an evaluation gave no value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The review's budget is spent (and records it).
    OverBudget,
    /// The expression failed, e.g. on a missing key.
    Error(String),
}

/// The environment every expression of a rule file is parsed and run in.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(environment()));

/// The environment of the JSONPatch expressions kadmit writes for
/// MutatingAdmissionPolicy: the rule files' one, the lists extension
/// (`lists.range`, `flatten`), the `JSONPatch` type and
/// `jsonpatch.escapeKey`, as the API server gives them.
static PATCH_ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = environment();
    // Each can only fail on a name declared twice, which the tests rule out.
    let _ = env.add_extension(::cel::extensions::lists);
    let _ = env.add_type(JsonPatchType);
    let _ = env.add_overload(
        "jsonpatch.escapeKey",
        "jsonpatch_escape_key_string",
        vec![::cel::common::types::STRING_TYPE],
        escape_key,
    );
    Arc::new(env)
});

fn environment() -> Env {
    let mut env = Env::default().with_stdlib();
    // Both can only fail on a name declared twice, which the tests rule out.
    let _ = env.add_extension(::cel::extensions::strings);
    let _ = quantity::register(&mut env);
    for m in macros() {
        let _ = env.add_macro(m);
    }
    let _ = env.add_overload(
        RANGE_CHARGE,
        "kadmit_range_dyn_int",
        vec![
            ::cel::common::types::DYN_TYPE,
            ::cel::common::types::INT_TYPE,
        ],
        charge_range,
    );
    let _ = env.add_overload(
        COPY_CHARGE,
        "kadmit_copy_dyn",
        vec![::cel::common::types::DYN_TYPE],
        charge_copy,
    );
    let _ = env.add_overload(
        MADE_CHARGE,
        "kadmit_made_dyn",
        vec![::cel::common::types::DYN_TYPE],
        charge_made,
    );
    use ::cel::common::types::{INT_TYPE, STRING_TYPE};
    let _ = env.add_overload(
        MATCHES,
        "kadmit_matches_string_string",
        vec![STRING_TYPE, STRING_TYPE],
        charged_matches,
    );
    let index_functions: [(&str, &str, ::cel::common::functions::Function); 2] = [
        (INDEX_OF, "kadmit_index_of", linear_index_of),
        (LAST_INDEX_OF, "kadmit_last_index_of", linear_last_index_of),
    ];
    for (name, id, function) in index_functions {
        let _ = env.add_overload(
            name,
            &format!("{id}_string_string"),
            vec![STRING_TYPE, STRING_TYPE],
            function,
        );
        let _ = env.add_overload(
            name,
            &format!("{id}_string_string_int"),
            vec![STRING_TYPE, STRING_TYPE, INT_TYPE],
            function,
        );
    }
    let _ = env.add_overload(
        SPLIT,
        "kadmit_split_string_string",
        vec![STRING_TYPE, STRING_TYPE],
        charged_split,
    );
    let _ = env.add_overload(
        SPLIT,
        "kadmit_split_string_string_int",
        vec![STRING_TYPE, STRING_TYPE, INT_TYPE],
        charged_split,
    );
    use ::cel::common::types::{DYN_TYPE, LIST_TYPE};
    let _ = env.add_overload(
        ADD,
        "kadmit_add_dyn_dyn",
        vec![DYN_TYPE, DYN_TYPE],
        charged_add,
    );
    let _ = env.add_overload(JOIN, "kadmit_join_list", vec![LIST_TYPE], charged_join);
    let _ = env.add_overload(
        FORMAT_CHARGE,
        "kadmit_format_charge_string_list",
        vec![STRING_TYPE, LIST_TYPE],
        charge_format,
    );
    let _ = env.add_overload(
        QUOTE,
        "kadmit_quote_string",
        vec![STRING_TYPE],
        charged_quote,
    );
    let _ = env.add_overload(
        JOIN,
        "kadmit_join_list_string",
        vec![LIST_TYPE, STRING_TYPE],
        charged_join,
    );
    let _ = env.add_overload(
        REPLACE,
        "kadmit_replace_string_string_string",
        vec![STRING_TYPE, STRING_TYPE, STRING_TYPE],
        charged_replace,
    );
    let _ = env.add_overload(
        REPLACE,
        "kadmit_replace_string_string_string_int",
        vec![STRING_TYPE, STRING_TYPE, STRING_TYPE, INT_TYPE],
        charged_replace,
    );
    env
}

impl Expression {
    /// Compiles `source`, inside `forEach` entries binding `bindings`
    /// (outermost first; `None` where an entry binds no name).
    pub fn compile(source: &str, bindings: &[Option<String>]) -> Result<Expression, CompileError> {
        Self::compile_within(source, bindings, Bounds::RULE_FILES)
    }

    /// Compiles `source` under other bounds (for expressions kadmit writes
    /// itself, such as the in-tree policies', which nest deeper than people
    /// write).
    pub fn compile_within(
        source: &str,
        bindings: &[Option<String>],
        bounds: Bounds,
    ) -> Result<Expression, CompileError> {
        Self::compile_in(&ENV, &["strings", "optional"], source, bindings, bounds)
    }

    /// Compiles a MutatingAdmissionPolicy `jsonPatch` expression: one that
    /// may construct `JSONPatch{op, path, from, value}` values and call
    /// `lists.range` and `jsonpatch.escapeKey` (see
    /// [`Expression::patch_operations`]).
    pub fn compile_patch(source: &str, bounds: Bounds) -> Result<Expression, CompileError> {
        Self::compile_in(
            &PATCH_ENV,
            &["strings", "optional", "lists", "jsonpatch"],
            source,
            &[],
            bounds,
        )
    }

    /// Compiles in `env`, whose functions `namespaces` qualify.
    fn compile_in(
        env: &Arc<Env>,
        namespaces: &[&str],
        source: &str,
        bindings: &[Option<String>],
        bounds: Bounds,
    ) -> Result<Expression, CompileError> {
        let Bounds {
            source_bytes: max_source_bytes,
            nodes: max_nodes,
            source_nesting: max_source_nesting,
            depth: max_depth,
            loop_nesting: max_loop_nesting,
        } = bounds;
        if source.len() > max_source_bytes {
            return Err(CompileError {
                message: format!(
                    "the expression is {} bytes, over the limit of {max_source_bytes}",
                    source.len()
                ),
                hint: Some("split it into several conditions".to_owned()),
            });
        }
        let nesting = source_nesting(source);
        if nesting > max_source_nesting {
            return Err(CompileError {
                message: format!(
                    "brackets and conditionals nest {nesting} deep, over the limit of \
                     {max_source_nesting}"
                ),
                hint: Some("split it into several conditions".to_owned()),
            });
        }
        // The parser is third-party code: should it panic on some input,
        // that is a rule file's error, not a crashed reload.
        let parsed = stacker::grow(PARSE_STACK_BYTES, || {
            // Compiling reads the environment and never changes it.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| env.compile(source)))
        })
        .map_err(|_| CompileError {
            message: "the CEL parser failed on this expression".to_owned(),
            hint: Some("simplify the expression".to_owned()),
        })?;
        let program = parsed.map_err(|errors| CompileError {
            message: errors
                .errors
                .iter()
                .map(|e| format!("{} (at {}:{} of the expression)", e.msg, e.pos.0, e.pos.1))
                .collect::<Vec<_>>()
                .join("; "),
            hint: Some("see https://github.com/google/cel-spec for the syntax".to_owned()),
        })?;
        let mut known: Vec<(Arc<str>, Variable)> = vec![
            (Arc::from("object"), Variable::Object),
            (Arc::from("oldObject"), Variable::OldObject),
            (Arc::from("request"), Variable::Request),
        ];
        if !bindings.is_empty() {
            known.push((Arc::from("element"), Variable::Element));
        }
        for (depth, name) in bindings.iter().enumerate() {
            if let Some(name) = name {
                known.push((Arc::from(name.as_str()), Variable::Binding(depth)));
            }
        }
        let mut walk = Walk::new(&known, namespaces);
        stacker::grow(PARSE_STACK_BYTES, || walk.expr(program.expression()));
        if let Some(name) = walk.unknown {
            let names: Vec<&str> = known.iter().map(|(name, _)| &**name).collect();
            return Err(CompileError {
                message: format!("unknown variable `{name}`"),
                hint: Some(format!("the variables here are {}", names.join(", "))),
            });
        }
        if let Some(function) = walk
            .functions
            .iter()
            .find(|function| undeclared_function(env, function))
        {
            return Err(CompileError {
                message: format!("unknown function `{}`", function.shown),
                hint: Some(
                    "kadmit's CEL has the standard library, the strings extension and \
                     Kubernetes' quantity library, not timestamps, durations or the other \
                     Kubernetes libraries: see docs/rules.md, CEL"
                        .to_owned(),
                ),
            });
        }
        let split = "split it into several conditions";
        for (found, limit, what, hint) in [
            (walk.nodes, max_nodes, "the expression has {} nodes", split),
            (
                walk.deepest_node as u64,
                max_depth as u64,
                "the expression nests {} deep",
                split,
            ),
            (
                walk.deepest as u64,
                max_loop_nesting as u64,
                "comprehensions nest {} deep",
                "iterate with forEach entries instead",
            ),
        ] {
            if found > limit {
                return Err(CompileError {
                    message: format!(
                        "{}, over the limit of {limit}",
                        what.replace("{}", &found.to_string())
                    ),
                    hint: Some(hint.to_owned()),
                });
            }
        }
        let (used, nodes, literal_patterns) = (walk.used, walk.nodes, walk.literal_patterns);
        // Within the depth just checked.
        let mut evaluated = program.expression().clone();
        stacker::grow(PARSE_STACK_BYTES, || charge_made_values(&mut evaluated));
        let variables = known
            .into_iter()
            .filter(|(name, _)| used.iter().any(|u| u == &**name))
            .collect();
        Ok(Expression {
            source: Arc::from(source),
            env: Arc::clone(env),
            program,
            evaluated: Box::new(evaluated),
            nodes,
            variables,
            literal_patterns,
            compiled_patterns: None,
        })
    }

    /// The patterns of the `matches()` calls written as string literals,
    /// for the rule compiler to compile and bound as it does a rule file's
    /// `matches`: a pattern that can never compile fails at load time, not
    /// on every review.
    pub fn literal_patterns(&self) -> &[String] {
        &self.literal_patterns
    }

    /// Gives the expression its literal patterns compiled (by the rule
    /// compiler, within the rules directory's regex bounds), so that no
    /// review compiles them again, however many distinct ones the rules
    /// hold: a pattern missing from `compiled` is compiled at run time.
    pub fn use_literal_patterns(&mut self, compiled: HashMap<String, Pattern>) {
        self.compiled_patterns = (!compiled.is_empty()).then(|| Arc::new(compiled));
    }

    /// The source text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The fields the expression selects from its variables, each as a
    /// rule file's path writes it, with the literals it is compared with:
    /// what the rule compiler checks a path condition for (a field no
    /// matched kind has, a literal of another type than its field). A loop
    /// variable of `all`, `exists`, `map` or `filter` over a selected list
    /// stands for `[*]` of it. Maximal chains only: `object.spec.x` and
    /// not `object.spec` besides.
    pub fn selections(&self) -> Vec<Selection> {
        let mut walk = Selections {
            variables: &self.variables,
            locals: Vec::new(),
            found: Vec::new(),
        };
        stacker::grow(PARSE_STACK_BYTES, || walk.expr(self.program.expression()));
        walk.found
    }

    /// The names the expression reads, with what each names.
    pub fn names(&self) -> impl Iterator<Item = (&str, Variable)> + '_ {
        self.variables
            .iter()
            .map(|(name, variable)| (&**name, *variable))
    }

    /// The variables the expression reads.
    pub fn variables(&self) -> impl Iterator<Item = Variable> + '_ {
        self.variables.iter().map(|(_, variable)| *variable)
    }

    /// Evaluates the expression with the variables `value_of` gives (null
    /// where it gives none), charging `budget`.
    pub fn evaluate<'v>(
        &self,
        mut value_of: impl FnMut(Variable) -> Option<&'v Value>,
        budget: &Budget,
    ) -> Result<::cel::Value, Failure> {
        // Spent (or failed) before: making the variables would only cost.
        let left = budget.remaining();
        if left == 0 {
            budget.charge(1);
            return Err(Failure::OverBudget);
        }
        let mut context = Context::with_env(Arc::clone(&self.env));
        // The variables are made for this evaluation alone, borrowing the
        // documents' strings; what they take is within what the budget
        // leaves, in memory ([`Budget::memory_left`]) and in steps: past
        // `max_bytes`, the charge below for even one node is more than
        // the steps left, so they are not made at all.
        let mut size = Size {
            bytes: 0,
            memory: 0,
            limit: budget.memory_left(),
            max_bytes: (left / NODE_STEPS).saturating_mul(BYTES_PER_NODE_STEP),
        };
        for (name, variable) in &self.variables {
            let value: Box<dyn Val + 'v> = match value_of(*variable) {
                Some(value) => match to_val(value, &mut size) {
                    Some(value) => value,
                    None if size.bytes > size.max_bytes => {
                        budget.charge(u64::MAX);
                        return Err(Failure::OverBudget);
                    }
                    None => {
                        budget.out_of_memory();
                        return Err(Failure::OverBudget);
                    }
                },
                None => Box::new(CelNull),
            };
            context.add_variable_as_val(name.to_string(), value);
        }
        let bytes = size.bytes;
        let weight = NODE_STEPS.saturating_mul(1 + bytes / BYTES_PER_NODE_STEP);
        if !budget.charge(self.nodes.saturating_mul(weight)) {
            return Err(Failure::OverBudget);
        }
        let before = budget.remaining();
        LITERAL_PATTERNS.set(self.compiled_patterns.clone());
        METER.set(Meter {
            left: before,
            weight,
            spent: false,
            nodes: self.nodes,
            bytes,
        });
        // The interpreter is third-party code: a panic in it fails this
        // expression (and so the review), never the worker.
        let result = stacker::maybe_grow(EVAL_RED_ZONE_BYTES, EVAL_STACK_BYTES, || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                ::cel::objects::Value::resolve(&self.evaluated, &context)
            }))
        });
        let result = match result {
            Ok(result) => result,
            Err(_) => {
                METER.take();
                LITERAL_PATTERNS.take();
                return Err(Failure::Error("the CEL interpreter failed".to_owned()));
            }
        };
        let meter = METER.take();
        LITERAL_PATTERNS.take();
        if !budget.charge(before.saturating_sub(meter.left)) || meter.spent {
            budget.charge(u64::MAX);
            return Err(Failure::OverBudget);
        }
        // cel-interpreter's errors can quote whole values.
        result.map_err(|error| Failure::Error(as_written(shown_within(error, MAX_MESSAGE_BYTES))))
    }

    /// Evaluates a condition: true when the expression yields `true`.
    pub fn holds<'v>(
        &self,
        value_of: impl FnMut(Variable) -> Option<&'v Value>,
        budget: &Budget,
    ) -> Result<bool, Failure> {
        match self.evaluate(value_of, budget)? {
            ::cel::Value::Bool(holds) => Ok(holds),
            other => Err(Failure::Error(format!(
                "the expression yielded a {}, not a bool",
                other.type_of()
            ))),
        }
    }

    /// Evaluates a `jsonPatch` expression (see [`Expression::compile_patch`])
    /// into the JSON Patch it yields: a list of operations.
    pub fn patch_operations<'v>(
        &self,
        value_of: impl FnMut(Variable) -> Option<&'v Value>,
        budget: &Budget,
    ) -> Result<Value, Failure> {
        let value = self.evaluate(value_of, budget)?;
        match value.json() {
            Ok(patch @ Value::Array(_)) => Ok(patch),
            Ok(other) => Err(Failure::Error(shown_within(
                format_args!("the expression yielded {other}, not a list of JSONPatch values"),
                MAX_MESSAGE_BYTES,
            ))),
            Err(error) => Err(Failure::Error(shown_within(
                format_args!("the expression yielded a value with no JSON form: {error:?}"),
                MAX_MESSAGE_BYTES,
            ))),
        }
    }
}

/// The functions kadmit runs in place of the ones a rule writes, by the
/// name the rule writes: an error names the function the rule called
/// ("no matching overload for 'split'"), not kadmit's. (`+` and the
/// charging wrappers take `dyn` operands, so no overload error names them.)
const WRITTEN_NAMES: [(&str, &str); 8] = [
    (FORMAT_CHARGE, "format"),
    (REPLACE, "replace"),
    (SPLIT, "split"),
    (JOIN, "join"),
    (INDEX_OF, "indexOf"),
    (LAST_INDEX_OF, "lastIndexOf"),
    (QUOTE, "strings.quote"),
    (MATCHES, "matches"),
];

/// `message` with each of kadmit's function names quoted in it
/// (`'@kadmit_split'`) replaced by the one the rule wrote.
fn as_written(mut message: String) -> String {
    if !message.contains("'@") {
        return message;
    }
    for (kadmits, written) in WRITTEN_NAMES {
        message = message.replace(&format!("'{kadmits}'"), &format!("'{written}'"));
    }
    message
}

/// What the running evaluation may still spend, for [`charge_range`].
#[derive(Debug, Clone, Copy, Default)]
struct Meter {
    left: u64,
    /// What one node is charged, `4 × (1 + B / 128)`: B counts the values
    /// made so far ([`spend_made`]) with the variables.
    weight: u64,
    spent: bool,
    /// The expression's nodes.
    nodes: u64,
    /// B: the bytes of the variables and of the values made so far.
    bytes: u64,
}

thread_local! {
    static METER: Cell<Meter> = const {
        Cell::new(Meter { left: 0, weight: 1, spent: false, nodes: 0, bytes: 0 })
    };
}

/// `@kadmit_range(range, body_nodes)`: charges a comprehension about to
/// visit `range`, and passes the range on.
fn charge_range<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let mut args = args.into_iter();
    let (Some(range), Some(body)) = (args.next(), args.next()) else {
        return Err(ExecutionError::invalid_argument_count(2, 0));
    };
    let elements = range
        .as_sizer()
        .map_or(0, |sizer| u64::try_from(*sizer.size().inner()).unwrap_or(0));
    let body = body
        .downcast_ref::<CelInt>()
        .map_or(1, |nodes| u64::try_from(*nodes.inner()).unwrap_or(1));
    let weight = METER.get().weight;
    spend(
        (elements + 1).saturating_mul(body).saturating_mul(weight),
        "comprehension",
    )?;
    Ok(range)
}

/// `@kadmit_copy(item)`: charges what the interpreter's copy of `item` into
/// a list or map costs ([`copy_steps`]: it copies the item whole), and
/// passes the item on. The range's charge counts a loop body's nodes, not
/// the size of what they yield: without this,
/// `object.data.map(k, [object, object])` on a ConfigMap of 1,150 keys
/// made 1.7 GB of copies within the step budget, and `[object, …]` of a
/// 350 KB object 1.9 GB for 120 elements.
fn charge_copy<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let Some(item) = args.into_iter().next() else {
        return Err(ExecutionError::invalid_argument_count(1, 0));
    };
    spend_copy(item.as_ref(), "copy")?;
    Ok(item)
}

/// `@kadmit_made(value)`: charges `value` as made ([`spend_made`]) when a
/// call made it (it is the call's own, not borrowed from a variable or
/// another value), and passes it on. `d.reverse()` of a 1 MB string made
/// by `replace`, repeated in nested loops, took 10 s within the budget, and
/// thirty nested `indexOf(d.reverse(), …)` of a 4 MB one held 300 MB.
fn charge_made<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let Some(value) = args.into_iter().next() else {
        return Err(ExecutionError::invalid_argument_count(1, 0));
    };
    if let CowVal::Owned(made) = &value {
        spend_copy(made.as_ref(), "call")?;
    }
    Ok(value)
}

/// Charges `value`, made or copied by `function`, as [`spend_made`] does,
/// by what copying it costs ([`copy_steps`], walked no further than the
/// steps left).
fn spend_copy(value: &dyn Val, function: &str) -> Result<(), ExecutionError> {
    spend_made(copy_steps(value, METER.get().left), function)
}

/// Charges making a value of `cost` steps (its bytes, and [`VALUE_STEPS`]
/// per value in it), and counts it with the variables from then on: every
/// node is charged once more for it, as for a variable of its size before
/// the expression runs, and each comprehension starting later is charged
/// per node by the weight that counts it. Without that, a value made once
/// and then read by loops ran at the charge of a small one (`reverse`,
/// `indexOf`, `==` over a 1 MB string in nested loops: 10 s).
fn spend_made(cost: u64, function: &str) -> Result<(), ExecutionError> {
    let meter = METER.get();
    let bytes = meter.bytes.saturating_add(cost);
    let reads = meter
        .nodes
        .saturating_mul(NODE_STEPS)
        .saturating_mul(bytes / BYTES_PER_NODE_STEP - meter.bytes / BYTES_PER_NODE_STEP);
    spend(cost.saturating_add(reads), function)?;
    let mut meter = METER.get();
    meter.bytes = bytes;
    meter.weight = NODE_STEPS.saturating_mul(1 + bytes / BYTES_PER_NODE_STEP);
    METER.set(meter);
    Ok(())
}

/// Charges in `e` each value the interpreter copies or a call makes:
///
/// - each element of a list or map literal that is not a constant (keys
///   and values, at any depth) passes through [`COPY_CHARGE`], as the `map`
///   and `filter` macros do the items they append: the interpreter copies
///   it whole into the literal. Charged by its own size as it is copied,
///   not every element by the size of all the variables before the
///   expression runs, `x in [oldObject.metadata.namespace, 'a']` is cheap
///   on an object of 700 KB (the charge before it runs denied it);
/// - the result of each call the rule writes passes through
///   [`MADE_CHARGE`], but for the calls that only choose or compare values
///   ([`makes_nothing`]) and kadmit's own, which charge what they make
///   themselves.
fn charge_made_values(e: &mut IdedExpr) {
    use ::cel::common::ast::EntryExpr;
    let charged = |part: &mut IdedExpr| {
        charge_made_values(part);
        if !matches!(part.expr, Expr::Literal(_)) {
            wrap(part, COPY_CHARGE);
        }
    };
    match &mut e.expr {
        Expr::List(list) => list.elements.iter_mut().for_each(charged),
        Expr::Map(map) => {
            for entry in &mut map.entries {
                if let EntryExpr::MapEntry(entry) = &mut entry.expr {
                    charged(&mut entry.key);
                    charged(&mut entry.value);
                }
            }
        }
        Expr::Struct(strct) => {
            for entry in &mut strct.entries {
                if let EntryExpr::StructField(field) = &mut entry.expr {
                    charge_made_values(&mut field.value);
                }
            }
        }
        Expr::Select(select) => charge_made_values(&mut select.operand),
        Expr::Call(call) => {
            if let Some(target) = &mut call.target {
                charge_made_values(target);
            }
            call.args.iter_mut().for_each(charge_made_values);
            if !makes_nothing(&call.func_name) {
                wrap(e, MADE_CHARGE);
            }
        }
        Expr::Comprehension(c) => {
            for part in [
                &mut c.iter_range,
                &mut c.accu_init,
                &mut c.loop_cond,
                &mut c.loop_step,
                &mut c.result,
            ] {
                charge_made_values(part);
            }
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// Whether a call to `function` makes no value worth charging: kadmit's
/// own functions (which charge what they make, or make nothing), the
/// operators that yield one of their operands or a boolean, and the
/// interpreter's `+` that the `map` and `filter` expansions append with
/// (the interpreter recognises that shape, and its items are charged), and
/// `format`, whose most is charged before it runs ([`FORMAT_CHARGE`]).
fn makes_nothing(function: &str) -> bool {
    function.starts_with('@')
        || [
            operators::LOGICAL_AND,
            operators::LOGICAL_OR,
            operators::LOGICAL_NOT,
            operators::CONDITIONAL,
            operators::EQUALS,
            operators::NOT_EQUALS,
            operators::LESS,
            operators::LESS_EQUALS,
            operators::GREATER,
            operators::GREATER_EQUALS,
            operators::IN,
            operators::ADD,
            "dyn",
            "size",
            "format",
        ]
        .contains(&function)
}

/// Replaces `e` by a call of `function` on it, unless it is one already.
fn wrap(e: &mut IdedExpr, function: &str) {
    if matches!(&e.expr, Expr::Call(call) if call.func_name == function) {
        return;
    }
    let inner = std::mem::take(e);
    *e = IdedExpr {
        id: inner.id,
        expr: Expr::Call(CallExpr {
            func_name: function.to_owned(),
            target: None,
            args: vec![inner],
        }),
    };
}

/// Takes `cost` steps from the running evaluation's budget, or fails
/// `function` (and records the budget as spent) when fewer are left.
fn spend(cost: u64, function: &str) -> Result<(), ExecutionError> {
    let mut meter = METER.get();
    if cost > meter.left {
        meter.spent = true;
        meter.left = 0;
        METER.set(meter);
        return Err(ExecutionError::FunctionError {
            function: function.to_owned(),
            message: "over the review's evaluation budget".to_owned(),
        });
    }
    meter.left -= cost;
    METER.set(meter);
    Ok(())
}

/// `@kadmit_replace(s, from, to[, n])`: the strings extension's `replace`,
/// charged a step per byte of the string it makes before making it. The
/// result of a replace can be the product of its operands' sizes (every
/// character of `s` replaced by a long `to`), and chained replaces
/// multiply again, which the charge per node does not cover.
fn charged_replace<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    use ::cel::common::types::CelString;
    let (Some(text), Some(from), Some(to)) = (
        args.first().and_then(|a| a.downcast_ref::<CelString>()),
        args.get(1).and_then(|a| a.downcast_ref::<CelString>()),
        args.get(2).and_then(|a| a.downcast_ref::<CelString>()),
    ) else {
        return Err(ExecutionError::function_error(
            "replace",
            "takes a string, the string to replace and its replacement",
        ));
    };
    let (text, from, to) = (text.inner(), from.inner(), to.inner());
    // A negative count, as in cel-go, replaces every occurrence.
    let limit = match args.get(3) {
        None => None,
        Some(n) => match n.downcast_ref::<CelInt>() {
            Some(n) => usize::try_from(*n.inner()).ok(),
            None => {
                return Err(ExecutionError::function_error(
                    "replace",
                    "the count is an int",
                ));
            }
        },
    };
    let found = if from.is_empty() {
        text.chars().count() + 1
    } else {
        text.matches(from).count()
    };
    let replaced = limit.map_or(found, |limit| limit.min(found));
    let size =
        (text.len() - replaced * from.len()).saturating_add(replaced.saturating_mul(to.len()));
    spend_made(
        u64::try_from(size).unwrap_or(u64::MAX).saturating_add(1),
        "replace",
    )?;
    let result = match limit {
        Some(limit) => text.replacen(from, to, limit),
        None => text.replace(from, to),
    };
    Ok(CowVal::owned(CelString::from(result)))
}

/// The strings extension's "index out of range" error.
fn out_of_range(function: &str, index: i64) -> ExecutionError {
    ExecutionError::function_error(function, format!("index out of range: {index}"))
}

/// The byte offset of the code point at `index` in `text` (its length when
/// `index` is the number of code points); `None` past that.
fn byte_offset(text: &str, index: usize) -> Option<usize> {
    if index == 0 {
        return Some(0);
    }
    text.char_indices()
        .map(|(at, _)| at)
        .chain(std::iter::once(text.len()))
        .nth(index)
}

/// `@kadmit_indexOf(s, t[, from])`: the strings extension's `indexOf`,
/// with its results (the code-point index of the first `t` at or after
/// `from`, -1 when there is none) and errors (a `from` below 0, or not
/// below the length of `s` unless `t` is empty), found by `str::find`,
/// which takes time linear in the strings where the extension's compares
/// `t` at every position (11.9 s for 700,000 characters and a
/// 350,000-character `t`).
fn linear_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let found = index_operands(&args, "indexOf", |text, needle, from| {
        let Some(from) = from else {
            return Ok(text.find(needle).map(|at| text[..at].chars().count()));
        };
        let start = index_start(text, needle, from, "indexOf")?;
        let Ok(start) = start else {
            return Ok(Some(start.unwrap_or_else(|at| at)));
        };
        let Some(begin) = byte_offset(text, start) else {
            return Err(out_of_range("indexOf", from));
        };
        Ok(text[begin..]
            .find(needle)
            .map(|at| start + text[begin..begin + at].chars().count()))
    })?;
    Ok(CowVal::owned(::cel::common::types::CelInt::from(found)))
}

/// `@kadmit_lastIndexOf(s, t[, from])`: the strings extension's
/// `lastIndexOf` (the code-point index of the last `t` that starts at or
/// before `from`), as [`linear_index_of`] is its `indexOf`, by `str::rfind`.
fn linear_last_index_of<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let found = index_operands(&args, "lastIndexOf", |text, needle, from| {
        let Some(from) = from else {
            if needle.is_empty() {
                return Ok(Some(text.chars().count()));
            }
            return Ok(text.rfind(needle).map(|at| text[..at].chars().count()));
        };
        let start = index_start(text, needle, from, "lastIndexOf")?;
        let Ok(start) = start else {
            return Ok(Some(start.unwrap_or_else(|at| at)));
        };
        let Some(begin) = byte_offset(text, start) else {
            return Err(out_of_range("lastIndexOf", from));
        };
        // A `t` starting at or before `begin` ends by `begin + t.len()`,
        // and on a character boundary.
        let mut end = begin.saturating_add(needle.len()).min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        Ok(text[..end]
            .rfind(needle)
            .map(|at| text[..at].chars().count()))
    })?;
    Ok(CowVal::owned(::cel::common::types::CelInt::from(found)))
}

/// Reads `(s, t[, from])` for `function` and gives them to `find`; its
/// code-point index becomes an int, -1 for none.
fn index_operands<'b, 'v>(
    args: &[CowVal<'b, 'v>],
    function: &str,
    find: impl FnOnce(&str, &str, Option<i64>) -> Result<Option<usize>, ExecutionError>,
) -> Result<i64, ExecutionError> {
    use ::cel::common::types::{CelInt, CelString};
    let (Some(text), Some(needle)) = (
        args.first().and_then(|a| a.downcast_ref::<CelString>()),
        args.get(1).and_then(|a| a.downcast_ref::<CelString>()),
    ) else {
        return Err(ExecutionError::function_error(
            function,
            "takes a string, the string to find and optionally an index",
        ));
    };
    let from = match args.get(2) {
        None => None,
        Some(from) => match from.downcast_ref::<CelInt>() {
            Some(from) => Some(*from.inner()),
            None => {
                return Err(ExecutionError::function_error(
                    function,
                    "the index is an int",
                ));
            }
        },
    };
    let found = find(text.inner(), needle.inner(), from)?;
    Ok(found.map_or(-1, |at| i64::try_from(at).unwrap_or(i64::MAX)))
}

/// Checks the index `from` as the extension does: `Err(answer)` when the
/// answer needs no search (an empty `t` is found at `from`, or at the end
/// when `from` is past it), else `Ok(from)`.
fn index_start(
    text: &str,
    needle: &str,
    from: i64,
    function: &str,
) -> Result<Result<usize, usize>, ExecutionError> {
    let Ok(start) = usize::try_from(from) else {
        return Err(out_of_range(function, from));
    };
    let length = text.chars().count();
    if needle.is_empty() {
        return Ok(Err(start.min(length)));
    }
    if start >= length {
        return Err(out_of_range(function, from));
    }
    Ok(Ok(start))
}

/// `@kadmit_split(s, sep[, n])`: the strings extension's `split` (at most
/// `n` parts, the last holding the rest: none when `n` is 0, all when it
/// is negative; an empty `sep` splits between code points), charged
/// [`VALUE_STEPS`] per part and a step per byte of `s` before any part is
/// made: a 3 MB string split into one-character strings took 230 MB.
fn charged_split<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    use ::cel::common::types::{CelInt, CelList, CelString};
    use ::cel::common::value::Val;
    let (Some(text), Some(separator)) = (
        args.first().and_then(|a| a.downcast_ref::<CelString>()),
        args.get(1).and_then(|a| a.downcast_ref::<CelString>()),
    ) else {
        return Err(ExecutionError::function_error(
            "split",
            "takes a string, a separator and optionally a count",
        ));
    };
    let (text, separator) = (text.inner(), separator.inner());
    let limit = match args.get(2) {
        None => None,
        Some(n) => match n.downcast_ref::<CelInt>() {
            // A negative count splits at every separator.
            Some(n) => usize::try_from(*n.inner()).ok(),
            None => {
                return Err(ExecutionError::function_error(
                    "split",
                    "the count is an int",
                ));
            }
        },
    };
    let found = if separator.is_empty() {
        text.chars().count()
    } else {
        text.matches(separator).count() + 1
    };
    let parts = limit.map_or(found, |limit| limit.min(found));
    spend_made(
        u64::try_from(parts)
            .unwrap_or(u64::MAX)
            .saturating_mul(VALUE_STEPS)
            .saturating_add(u64::try_from(text.len()).unwrap_or(u64::MAX))
            .saturating_add(1),
        "split",
    )?;
    let parts: Vec<&str> = match (limit, separator.is_empty()) {
        (Some(0), _) => Vec::new(),
        (Some(limit), true) => {
            let mut parts = Vec::with_capacity(parts);
            let mut rest = text;
            while let Some(c) = rest.chars().next() {
                if parts.len() + 1 == limit {
                    break;
                }
                let (head, tail) = rest.split_at(c.len_utf8());
                parts.push(head);
                rest = tail;
            }
            if !rest.is_empty() {
                parts.push(rest);
            }
            parts
        }
        (Some(limit), false) => text.splitn(limit, separator).collect(),
        (None, true) => text
            .char_indices()
            .map(|(at, c)| &text[at..at + c.len_utf8()])
            .collect(),
        (None, false) => text.split(separator).collect(),
    };
    let list: CelList<'static> = parts
        .into_iter()
        .map(|part| Box::new(CelString::from(part.to_owned())) as Box<dyn Val>)
        .collect::<Vec<_>>()
        .into();
    Ok(CowVal::owned(list))
}

/// `@kadmit_add(a, b)`: CEL's `+` as a rule file writes it, charged for
/// what the sum copies before it is made: a step per byte of the strings
/// and bytes in it and [`VALUE_STEPS`] per value, at any depth of a list
/// or map (the interpreter copies every element of both lists). Numbers
/// cost nothing more. Without it, `[s].map(x, x + x + x + x)` chained eight
/// times made a string 65,536 times as long as `s` for a few dozen nodes'
/// charge. The comprehensions kadmit expands keep the interpreter's own
/// `+`: their appends are charged as each item is made
/// ([`charge_copy`]).
fn charged_add<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (Some(lhs), Some(rhs)) = (args.first(), args.get(1)) else {
        return Err(ExecutionError::function_error("+", "takes two operands"));
    };
    spend_copy(lhs.as_ref(), "+")?;
    spend_copy(rhs.as_ref(), "+")?;
    let adder = lhs.as_adder().ok_or_else(|| {
        let value = |operand: &CowVal<'_, '_>| {
            ::cel::Value::try_from(operand.as_ref()).unwrap_or(::cel::Value::Null)
        };
        ExecutionError::UnsupportedBinaryOperator("add", value(lhs), value(rhs))
    })?;
    let sum = adder.add(rhs.as_ref())?.into_owned();
    Ok(CowVal::Owned(sum))
}

/// What copying `value` whole costs: nothing for a number or another
/// scalar, a step per byte of a string or bytes, and [`VALUE_STEPS`] per
/// element of a list, entry of a map or optional, plus what its members
/// cost; or a count over `limit` as soon as it passes it, so a copy the
/// budget cannot pay for is not walked to the end. Walked with a stack of
/// its own, not by recursion.
fn copy_steps(value: &dyn ::cel::common::value::Val, limit: u64) -> u64 {
    use ::cel::common::types::{CelBytes, CelList, CelMap, CelOptional, CelString};
    use ::cel::common::value::Val;
    let bytes = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    let mut steps = 0u64;
    let mut pending: Vec<&dyn Val> = vec![value];
    while let Some(value) = pending.pop() {
        if steps > limit {
            break;
        }
        // An optional (`object.?x`) is copied with what it holds: counted
        // as nothing, a list of 60 of them held 60 copies of a 180 KB
        // object uncharged (326 MB), and sums of such lists 4 GB. Structs,
        // the other values holding values, cannot be made: no message type
        // is declared.
        if let Some(optional) = value.downcast_ref::<CelOptional>() {
            steps = steps.saturating_add(VALUE_STEPS);
            pending.extend(optional.inner());
            continue;
        }
        if let Some(text) = value.downcast_ref::<CelString>() {
            steps = steps.saturating_add(bytes(text.inner().len()));
        } else if let Some(data) = value.downcast_ref::<CelBytes>() {
            steps = steps.saturating_add(bytes(data.inner().len()));
        } else if let Some(list) = value.downcast_ref::<CelList>() {
            steps = steps.saturating_add(bytes(list.inner().len()).saturating_mul(VALUE_STEPS));
            pending.extend(list.inner().iter().map(|element| element.as_ref()));
        } else if let Some(map) = value.downcast_ref::<CelMap>() {
            steps = steps.saturating_add(bytes(map.inner().len()).saturating_mul(VALUE_STEPS));
            for (key, member) in map.inner() {
                pending.push(key.inner());
                pending.push(member.as_ref());
            }
        }
    }
    steps
}

/// `@kadmit_join(list[, sep])`: the strings extension's `join`, charged a
/// step per byte of the string it makes before making it: a long `sep`
/// between many short strings makes the product of their sizes.
fn charged_join<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    use ::cel::common::types::CelString;
    let Some(list) = args.first() else {
        return Err(ExecutionError::invalid_argument_count(1, 0));
    };
    let separator = match args.get(1) {
        None => "",
        Some(separator) => match separator.downcast_ref::<CelString>() {
            Some(separator) => separator.inner(),
            None => {
                return Err(ExecutionError::function_error(
                    "join",
                    "the separator is a string",
                ));
            }
        },
    };
    let Some(items) = list.as_iterable() else {
        return Err(ExecutionError::UnexpectedType {
            got: list.get_type().name().to_owned(),
            want: "iterable".to_owned(),
        });
    };
    let mut parts = Vec::new();
    let mut iter = items.iter();
    while let Some(item) = iter.next() {
        match item.downcast_ref::<CelString>() {
            Some(part) => parts.push(part.inner()),
            None => {
                return Err(ExecutionError::UnexpectedType {
                    got: item.get_type().name().to_owned(),
                    want: "string".to_owned(),
                });
            }
        }
    }
    let size = parts
        .iter()
        .map(|part| part.len())
        .fold(0_usize, usize::saturating_add)
        .saturating_add(
            separator
                .len()
                .saturating_mul(parts.len().saturating_sub(1)),
        );
    spend_made(
        u64::try_from(size)
            .unwrap_or(u64::MAX)
            .saturating_add(VALUE_STEPS),
        "join",
    )?;
    Ok(CowVal::owned(CelString::from(parts.join(separator))))
}

/// `@kadmit_format_charge(s, args)`: charges the most `s.format(args)` can
/// make, before the strings extension's `format` makes it, and returns
/// `s`. `format` writes the format string and, for each clause, one
/// argument in order, so it makes at most the format string and the
/// first as many arguments as `s` holds `%`, each as [`format_bytes`]
/// bounds it. Without this charge `'%s%s%s%s%s%s%s%s'.format([x, …])` in
/// eight chained `map`s made a string 8^8 times as long as `x` for a few
/// dozen nodes' charge.
fn charge_format<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    use ::cel::common::types::CelString;
    let (Some(text), Some(list)) = (args.first(), args.get(1)) else {
        return Err(ExecutionError::invalid_argument_count(2, args.len()));
    };
    let Some(format) = text.downcast_ref::<CelString>() else {
        return Err(ExecutionError::function_error(
            "format",
            "the format is a string",
        ));
    };
    let Some(items) = list.as_iterable() else {
        return Err(ExecutionError::UnexpectedType {
            got: list.get_type().name().to_owned(),
            want: "list".to_owned(),
        });
    };
    let clauses = format.inner().matches('%').count();
    let left = METER.get().left;
    let mut bytes = u64::try_from(format.inner().len()).unwrap_or(u64::MAX);
    let mut iter = items.iter();
    let mut taken = 0;
    while taken < clauses
        && bytes <= left
        && let Some(item) = iter.next()
    {
        bytes = bytes.saturating_add(format_bytes(item, left.saturating_sub(bytes)));
        taken += 1;
    }
    spend_made(bytes.saturating_add(VALUE_STEPS), "format")?;
    Ok(text.clone())
}

/// The most `format` writes for `value` by any clause: twice a string's
/// bytes (`%x` writes two hex digits a byte), three times a byte string's
/// (`%s` writes an invalid byte as U+FFFD, three bytes), [`FORMAT_SCALAR_BYTES`]
/// for a number or another scalar (`%.100f` of 1e308 writes 410), and for a
/// list or map (`%s`) what its members take plus [`FORMAT_SCALAR_BYTES`]
/// each for brackets and separators. Walked with a stack of its own, and
/// only until it passes `enough`.
fn format_bytes(value: &dyn ::cel::common::value::Val, enough: u64) -> u64 {
    use ::cel::common::types::{CelBytes, CelList, CelMap, CelString};
    use ::cel::common::value::Val;
    let bytes = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    let mut total = 0u64;
    let mut pending: Vec<&dyn Val> = vec![value];
    while let Some(value) = pending.pop() {
        if total > enough {
            break;
        }
        if let Some(text) = value.downcast_ref::<CelString>() {
            total = total.saturating_add(bytes(text.inner().len()).saturating_mul(2));
        } else if let Some(data) = value.downcast_ref::<CelBytes>() {
            total = total.saturating_add(bytes(data.inner().len()).saturating_mul(3));
        } else if let Some(list) = value.downcast_ref::<CelList>() {
            total = total.saturating_add(
                bytes(list.inner().len())
                    .saturating_add(1)
                    .saturating_mul(FORMAT_SCALAR_BYTES),
            );
            pending.extend(list.inner().iter().map(|element| element.as_ref()));
        } else if let Some(map) = value.downcast_ref::<CelMap>() {
            total = total.saturating_add(
                bytes(map.inner().len())
                    .saturating_add(1)
                    .saturating_mul(FORMAT_SCALAR_BYTES),
            );
            for (key, member) in map.inner() {
                pending.push(key.inner());
                pending.push(member.as_ref());
            }
        } else {
            total = total.saturating_add(FORMAT_SCALAR_BYTES);
        }
    }
    total
}

/// What [`format_bytes`] counts for a scalar other than a string, and per
/// list or map besides its members.
const FORMAT_SCALAR_BYTES: u64 = 512;

/// `@kadmit_quote(s)`: the strings extension's `strings.quote`, charged a
/// step per byte of the quoted string before making it. Quoting doubles a
/// string of backslashes, so quotes of quotes grow exponentially: twenty
/// nested made a megabyte of a 256-byte annotation.
fn charged_quote<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    use ::cel::common::types::CelString;
    let Some(text) = args.first().and_then(|a| a.downcast_ref::<CelString>()) else {
        return Err(ExecutionError::function_error(
            "strings.quote",
            "takes a string",
        ));
    };
    let escaped = |c: char| -> Option<&'static str> {
        Some(match c {
            '\x07' => "\\a",
            '\x08' => "\\b",
            '\x0c' => "\\f",
            '\n' => "\\n",
            '\r' => "\\r",
            '\t' => "\\t",
            '\x0b' => "\\v",
            '\\' => "\\\\",
            '"' => "\\\"",
            _ => return None,
        })
    };
    let text = text.inner();
    let size = text
        .chars()
        .filter(|&c| escaped(c).is_some())
        .count()
        .saturating_add(text.len())
        .saturating_add(2);
    spend_made(
        u64::try_from(size).unwrap_or(u64::MAX).saturating_add(1),
        "strings.quote",
    )?;
    let mut quoted = String::with_capacity(size);
    quoted.push('"');
    for c in text.chars() {
        match escaped(c) {
            Some(escape) => quoted.push_str(escape),
            None => quoted.push(c),
        }
    }
    quoted.push('"');
    Ok(CowVal::owned(CelString::from(quoted)))
}

/// `@kadmit_matches(s, re)`: CEL's `matches`, whose pattern may come from
/// the request. cel-interpreter compiles the pattern at every call, up to
/// regex's default 10 MiB, for one step: a comprehension over a thousand
/// containers compiled a thousand regexes. Here a literal pattern was
/// compiled with the rule files; any other compiles within
/// [`MAX_MATCHES_REGEX_BYTES`], charged, once per thread while it stays
/// among the last [`MATCHES_KEPT`]; and each call is charged for matching
/// the text as a rule file's `matches` is ([`Pattern::match_steps`]).
fn charged_matches<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    use ::cel::common::types::{CelBool, CelString};
    let (Some(text), Some(pattern)) = (
        args.first().and_then(|a| a.downcast_ref::<CelString>()),
        args.get(1).and_then(|a| a.downcast_ref::<CelString>()),
    ) else {
        return Err(ExecutionError::function_error(
            "matches",
            "takes a string and a regex",
        ));
    };
    let (text, pattern) = (text.inner(), pattern.inner());
    spend(1, "matches")?;
    // Matched where it is kept, never through a clone: a regex's clone
    // starts with empty match caches.
    let charged_match =
        |compiled: &Pattern| compiled.is_match_charged(text, |steps| spend(steps, "matches"));
    let found = LITERAL_PATTERNS
        .with_borrow(|literals| literals.as_ref()?.get(pattern).map(charged_match))
        .or_else(|| MATCHES_COMPILED.with_borrow(|kept| kept.get(pattern).map(charged_match)));
    let matched = match found {
        Some(matched) => matched?,
        None => {
            let compiled = compile_matches_pattern(pattern)?;
            let matched = charged_match(&compiled);
            MATCHES_COMPILED.with_borrow_mut(|kept| {
                if kept.len() >= MATCHES_KEPT {
                    kept.clear();
                }
                kept.insert(pattern.to_owned(), compiled);
            });
            matched?
        }
    };
    Ok(CowVal::owned(CelBool::from(matched)))
}

/// Compiles a pattern `matches` met at run time, charging each size it is
/// tried at.
fn compile_matches_pattern(pattern: &str) -> Result<Pattern, ExecutionError> {
    let pattern_bytes =
        u64::try_from(pattern.len().min(MAX_MATCHES_PATTERN_BYTES)).unwrap_or(u64::MAX);
    let attempt_steps = MATCHES_COMPILE_STEPS
        .saturating_add(pattern_bytes.saturating_mul(MATCHES_PATTERN_STEPS_PER_BYTE));
    // Case-folding a large class takes time the pattern's length does not
    // price (`(?i)\P{Any}`: 52 ms a copy, debug build).
    if pattern.len() <= MAX_MATCHES_PATTERN_BYTES && Pattern::may_fold_large_classes(pattern) {
        spend(attempt_steps, "matches")?;
        return Err(ExecutionError::function_error(
            "matches",
            crate::excerpt::shown_within(
                format_args!(
                    "the pattern folds the case of a large class, which a regex taken at run \
                     time may not (with (?i), list a class's characters instead of \\p, \\P, \
                     \\w, \\d, \\s, nested classes or ranges beyond ASCII, or match \
                     case-sensitively): {pattern:?}"
                ),
                MAX_MESSAGE_BYTES,
            ),
        ));
    }
    let mut over_budget = None;
    let compiled = crate::plan::tiered_pattern(pattern, MAX_MATCHES_REGEX_BYTES, |_| {
        match spend(attempt_steps, "matches") {
            Ok(()) => true,
            Err(error) => {
                over_budget = Some(error);
                false
            }
        }
    });
    if let Some(error) = over_budget {
        return Err(error);
    }
    let compiled = compiled.map_err(|problem| {
        let why = match problem {
            RegexProblem::TooLong => format!(
                "a regex of {} bytes is more than {MAX_MATCHES_PATTERN_BYTES}",
                pattern.len()
            ),
            RegexProblem::TooBig => format!(
                "compiles to more than {} KiB",
                MAX_MATCHES_REGEX_BYTES >> 10
            ),
            RegexProblem::Invalid(why) => why,
        };
        ExecutionError::function_error(
            "matches",
            crate::excerpt::shown_within(
                // The reason first: a long pattern is cut.
                format_args!("the pattern is not a usable regex ({why}): {pattern:?}"),
                MAX_MESSAGE_BYTES,
            ),
        )
    })?;
    Ok(compiled)
}

/// `JSONPatch{op, path, from, value}`, the type MutatingAdmissionPolicy
/// `jsonPatch` expressions build their operations with; a value of it is a
/// map of those fields, which [`Expression::patch_operations`] turns into
/// JSON.
struct JsonPatchType;

static JSON_PATCH_TYPE: ::cel::common::types::Type =
    ::cel::common::types::Type::new_struct_type("JSONPatch");

impl ::cel::StructType for JsonPatchType {
    fn get_type(&self) -> &::cel::common::types::Type {
        &JSON_PATCH_TYPE
    }

    fn new_value<'b, 'v>(
        &self,
        fields: std::collections::BTreeMap<String, CowVal<'b, 'v>>,
    ) -> Result<Box<dyn ::cel::common::value::Val + 'v>, ExecutionError> {
        let mut map: HashMap<String, ::cel::Value> = HashMap::with_capacity(fields.len());
        for (name, value) in fields {
            let value = ::cel::Value::try_from(value.as_ref())?;
            let is_string = matches!(value, ::cel::Value::String(_));
            match name.as_str() {
                "op" => match &value {
                    ::cel::Value::String(op)
                        if ["add", "remove", "replace", "move", "copy", "test"]
                            .contains(&op.as_str()) => {}
                    ::cel::Value::String(op) => {
                        return Err(ExecutionError::function_error(
                            "JSONPatch",
                            format!(
                                "op {:?} is not a JSON Patch operation (add, remove, replace, \
                                 move, copy or test)",
                                crate::excerpt::field(op)
                            ),
                        ));
                    }
                    other => {
                        return Err(ExecutionError::function_error(
                            "JSONPatch",
                            format!("op must be a string, not a {}", other.type_of()),
                        ));
                    }
                },
                "path" | "from" if !is_string => {
                    return Err(ExecutionError::function_error(
                        "JSONPatch",
                        format!("{name} must be a string"),
                    ));
                }
                "path" | "from" | "value" => {}
                other => {
                    return Err(ExecutionError::function_error(
                        "JSONPatch",
                        format!("JSONPatch has no field {other}"),
                    ));
                }
            }
            map.insert(name, value);
        }
        if !map.contains_key("op") || !map.contains_key("path") {
            return Err(ExecutionError::function_error(
                "JSONPatch",
                "op and path are required",
            ));
        }
        Box::<dyn ::cel::common::value::Val>::try_from(::cel::Value::from(map))
    }
}

/// `jsonpatch.escapeKey(key)`: `key` as one JSON Pointer token (`~` as
/// `~0`, `/` as `~1`).
fn escape_key<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [key] = args.as_slice() else {
        return Err(ExecutionError::invalid_argument_count(1, args.len()));
    };
    match ::cel::Value::try_from(key.as_ref())? {
        ::cel::Value::String(key) => {
            let escaped = ::cel::Value::String(Arc::new(key.replace('~', "~0").replace('/', "~1")));
            Ok(CowVal::Owned(
                Box::<dyn ::cel::common::value::Val>::try_from(escaped)?,
            ))
        }
        other => Err(ExecutionError::function_error(
            "jsonpatch.escapeKey",
            format!("takes a string, not a {}", other.type_of()),
        )),
    }
}

/// What [`to_val`] has made so far: the bytes charged for reading it
/// (a step weight, see [`Expression::evaluate`]), which may not pass
/// `max_bytes`, and about the memory it takes, which may not pass `limit`.
struct Size {
    bytes: u64,
    memory: u64,
    limit: u64,
    max_bytes: u64,
}

impl Size {
    /// Counts `memory` more bytes; false once past either bound.
    fn take(&mut self, memory: u64) -> bool {
        self.memory = self.memory.saturating_add(memory);
        self.memory <= self.limit && self.bytes <= self.max_bytes
    }
}

/// Bytes of a value's slot in its list or map: a boxed trait object.
const VAL_SLOT_BYTES: u64 = std::mem::size_of::<Box<dyn Val>>() as u64;
/// Bytes a value takes besides its slot: its box, as large as a map's
/// (strings and keys borrow the document's text).
const VAL_BOX_BYTES: u64 = 64;
/// Bytes of a map key's place in the table.
const VAL_KEY_BYTES: u64 = std::mem::size_of::<::cel::common::types::CelMapKey<'static>>() as u64;

/// Bytes the table of a map of `len` entries takes: a hash table's buckets
/// are a power of two at most 7/8 full, each with a key, a value's slot and
/// a control byte.
fn table_memory(len: usize) -> u64 {
    let buckets = match len {
        0 => 0,
        1..=3 => 4,
        4..=7 => 8,
        _ => (len.saturating_mul(8) / 7)
            .checked_next_power_of_two()
            .unwrap_or(usize::MAX),
    };
    u64::try_from(buckets)
        .unwrap_or(u64::MAX)
        .saturating_mul(VAL_KEY_BYTES + VAL_SLOT_BYTES + 1)
}

/// A JSON value as a CEL value borrowing its strings and keys, adding
/// its size to `size`; `None`, dropping what was made, once that passes
/// its limit. The interpreter copies a value it is given whole into values
/// of its own, so a document is made for each evaluation from the JSON
/// (a copy kept per review would be copied again at each one).
fn to_val<'v>(value: &'v Value, size: &mut Size) -> Option<Box<dyn Val + 'v>> {
    use ::cel::common::types::{
        CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelString, CelUInt,
    };
    #[cfg(test)]
    VALUES_MADE.set(VALUES_MADE.get() + 1);
    size.bytes += 8;
    if !size.take(VAL_SLOT_BYTES + VAL_BOX_BYTES) {
        return None;
    }
    Some(match value {
        Value::Null => Box::new(CelNull),
        Value::Bool(b) => Box::new(CelBool::from(*b)),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Box::new(CelInt::from(i))
            } else if let Some(u) = n.as_u64() {
                Box::new(CelUInt::from(u))
            } else {
                Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN)))
            }
        }
        Value::String(s) => {
            size.bytes += s.len() as u64;
            Box::new(CelString::from(s.as_str()))
        }
        Value::Array(list) => {
            let mut out = Vec::with_capacity(list.len());
            for v in list {
                out.push(to_val(v, size)?);
            }
            Box::new(CelList::from(out))
        }
        Value::Object(map) => {
            // The table holds the values' slots, counted by each value.
            let slots = VAL_SLOT_BYTES.saturating_mul(map.len() as u64);
            if !size.take(table_memory(map.len()).saturating_sub(slots)) {
                return None;
            }
            let mut out: HashMap<CelMapKey<'v>, Box<dyn Val + 'v>> =
                HashMap::with_capacity(map.len());
            for (key, v) in map {
                size.bytes += key.len() as u64;
                out.insert(CelMapKey::from(key.as_str()), to_val(v, size)?);
            }
            Box::new(CelMap::from(out))
        }
    })
}

#[cfg(test)]
thread_local! {
    /// How many values [`to_val`] has made on this thread: what tests
    /// count to tell that variables were not made.
    pub(crate) static VALUES_MADE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The names of CEL's types, which expressions compare `type(x)` with.
const TYPE_NAMES: [&str; 11] = [
    "bool",
    "bytes",
    "double",
    "int",
    "list",
    "map",
    "null_type",
    "string",
    "type",
    "uint",
    "dyn",
];

/// Counts nodes and loop nesting, and finds the variables an expression
/// reads.
/// Whether `env` has no function `function` names: the interpreter only
/// finds out when a call runs ("Undeclared reference"), so an expression
/// calling, say, `timestamp()` compiled and then denied every review it
/// ran on. Told by running a call of it with no arguments, which looks
/// the function up and, when it is there, fails on the arguments without
/// doing any work.
fn undeclared_function(env: &Arc<Env>, function: &FunctionUse) -> bool {
    let Ok(program) = env.compile(&function.probe) else {
        return false;
    };
    let context = Context::with_env(Arc::clone(env));
    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| program.execute(&context)));
    // The probe names nothing else (a member call's receiver is a literal),
    // so any undeclared reference is the function (or its namespace).
    matches!(
        result,
        Ok(Err(::cel::ExecutionError::UndeclaredReference(_)))
    )
}

struct Walk<'k> {
    known: &'k [(Arc<str>, Variable)],
    /// Names that qualify functions (`lists` of `lists.range`), not
    /// variables.
    namespaces: &'k [&'k str],
    /// Names bound by enclosing comprehensions.
    locals: Vec<String>,
    used: Vec<String>,
    nodes: u64,
    nesting: usize,
    deepest: usize,
    /// Depth of the node being walked, and the deepest seen.
    depth: usize,
    deepest_node: usize,
    unknown: Option<String>,
    literal_patterns: Vec<String>,
    /// The functions called by name, each as a call that only looks it
    /// up (see [`Walk::call`]), once each.
    functions: Vec<FunctionUse>,
}

/// A function an expression calls, as [`undeclared_function`] probes it.
#[derive(Debug, PartialEq, Eq)]
struct FunctionUse {
    /// How the expression names it (`size`, `lists.range`).
    shown: String,
    /// An expression that calls it as the expression does (a global call
    /// `name()`, a member call `0.name()`, a qualified call `ns.name()`),
    /// with no arguments.
    probe: String,
}

impl<'k> Walk<'k> {
    /// Records a call of the function `name` (after `receiver`, `0.` for a
    /// member call), unless it is an operator (`_+_`, `@in`, `!_`, which
    /// the parser writes and the environment always has).
    fn call(&mut self, name: &str, receiver: &str) {
        if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return;
        }
        let function = FunctionUse {
            shown: name.to_owned(),
            probe: format!("{receiver}{name}()"),
        };
        if !self.functions.contains(&function) {
            self.functions.push(function);
        }
    }

    fn new(known: &'k [(Arc<str>, Variable)], namespaces: &'k [&'k str]) -> Self {
        Walk {
            known,
            namespaces,
            locals: Vec::new(),
            used: Vec::new(),
            nodes: 0,
            nesting: 0,
            deepest: 0,
            depth: 0,
            deepest_node: 0,
            unknown: None,
            literal_patterns: Vec::new(),
            functions: Vec::new(),
        }
    }

    fn expr(&mut self, e: &IdedExpr) {
        self.depth += 1;
        self.deepest_node = self.deepest_node.max(self.depth);
        self.node(e);
        self.depth -= 1;
    }

    fn node(&mut self, e: &IdedExpr) {
        self.nodes += 1;
        match &e.expr {
            Expr::Ident(name) => {
                if self.locals.iter().any(|local| local == name)
                    || TYPE_NAMES.contains(&name.as_str())
                {
                    return;
                }
                if self.known.iter().any(|(known, _)| **known == **name) {
                    if !self.used.contains(name) {
                        self.used.push(name.clone());
                    }
                } else if self.unknown.is_none() {
                    self.unknown = Some(name.clone());
                }
            }
            Expr::Call(call) => {
                if call.func_name == MATCHES
                    && let Some(IdedExpr {
                        expr: Expr::Literal(::cel::common::ast::LiteralValue::String(pattern)),
                        ..
                    }) = call.args.get(1)
                {
                    self.literal_patterns.push(pattern.inner().to_owned());
                }
                match call.target.as_deref() {
                    Some(IdedExpr {
                        expr: Expr::Ident(name),
                        ..
                    }) if self.namespaces.contains(&name.as_str())
                        && !self.locals.contains(name) =>
                    {
                        self.nodes += 1;
                        self.call(&format!("{name}.{}", call.func_name), "");
                    }
                    Some(target) => {
                        self.expr(target);
                        self.call(&call.func_name, "0.");
                    }
                    None => self.call(&call.func_name, ""),
                }
                call.args.iter().for_each(|arg| self.expr(arg));
            }
            Expr::Comprehension(c) => {
                self.expr(&c.iter_range);
                self.expr(&c.accu_init);
                let bound = 2 + usize::from(c.iter_var2.is_some());
                self.locals.push(c.iter_var.clone());
                self.locals.extend(c.iter_var2.clone());
                self.locals.push(c.accu_var.clone());
                // A `format` call's one-element loop ([`format`]) repeats
                // nothing.
                let nests = usize::from(c.iter_var != FORMAT_ARGS);
                self.nesting += nests;
                self.deepest = self.deepest.max(self.nesting);
                self.expr(&c.loop_cond);
                self.expr(&c.loop_step);
                self.expr(&c.result);
                self.nesting -= nests;
                self.locals.truncate(self.locals.len() - bound);
            }
            Expr::List(_) | Expr::Map(_) | Expr::Select(_) | Expr::Struct(_) => {
                for_each_part(e, |part| self.expr(part));
            }
            Expr::Literal(_) | Expr::Unspecified => {}
        }
    }
}

/// A field a CEL expression selects ([`Expression::selections`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    /// The path it selects, as a rule file writes it
    /// (`$.object.spec.hostNetwork`, `$c.image` for a `forEach` binding).
    pub path: String,
    /// The paths of what the comprehensions it is selected through run
    /// over (its `[*]`s): in CEL a loop over a map runs over its keys, so
    /// what it selects is known only when each of them is a list.
    pub loops: Vec<String>,
    /// The literals it is compared with.
    pub compared: Vec<Compared>,
}

/// A comparison of a selected field with literals, as JSON.
#[derive(Debug, Clone, PartialEq)]
pub enum Compared {
    /// `==`.
    Equals(Value),
    /// `!=`.
    NotEquals(Value),
    /// `in [...]`, the list's literal entries.
    In(Vec<Value>),
}

/// A path a CEL expression selects, with the paths of the ranges of the
/// loops it goes through ([`Selection::loops`]).
type Selected = (String, Vec<String>);

/// The walk of [`Expression::selections`].
struct Selections<'e> {
    variables: &'e [(Arc<str>, Variable)],
    /// Names bound by enclosing comprehensions, with the path they stand
    /// for when the loop runs over a selection, and the paths of the
    /// ranges that path goes through.
    locals: Vec<(String, Option<Selected>)>,
    found: Vec<Selection>,
}

impl Selections<'_> {
    /// The path `e` selects, when it is a chain of field selections and
    /// literal indices from a variable, with the ranges of the loops it
    /// goes through.
    fn path(&self, e: &IdedExpr) -> Option<Selected> {
        match &e.expr {
            Expr::Ident(name) => {
                if let Some((_, path)) = self.locals.iter().rev().find(|(local, _)| local == name) {
                    return path.clone();
                }
                let (_, variable) = self.variables.iter().find(|(known, _)| **known == **name)?;
                let path = match variable {
                    Variable::Object => "$.object".to_owned(),
                    Variable::OldObject => "$.oldObject".to_owned(),
                    Variable::Request => "$.request".to_owned(),
                    Variable::Element => "$".to_owned(),
                    Variable::Binding(_) => format!("${name}"),
                };
                Some((path, Vec::new()))
            }
            Expr::Select(select) => {
                let (base, loops) = self.path(&select.operand)?;
                Some((format!("{base}['{}']", escape_name(&select.field)), loops))
            }
            Expr::Call(call) if call.func_name == operators::INDEX && call.target.is_none() => {
                let (base, loops) = self.path(call.args.first()?)?;
                let path = match &call.args.get(1)?.expr {
                    Expr::Literal(LiteralValue::String(key)) => {
                        format!("{base}['{}']", escape_name(key.inner()))
                    }
                    Expr::Literal(LiteralValue::Int(index)) => format!("{base}[{}]", index.inner()),
                    _ => return None,
                };
                Some((path, loops))
            }
            _ => None,
        }
    }

    /// The path `e` selects when it is a value compared: not `has(...)`,
    /// which is a boolean whatever the field holds.
    fn compared_path(&self, e: &IdedExpr) -> Option<Selected> {
        match &e.expr {
            Expr::Select(select) if select.test => None,
            _ => self.path(e),
        }
    }

    /// Records the selection at `path` (once), with `compared`.
    fn record(&mut self, (path, loops): Selected, compared: Option<Compared>) {
        let at = match self.found.iter().position(|found| found.path == path) {
            Some(at) => at,
            None => {
                self.found.push(Selection {
                    path,
                    loops,
                    compared: Vec::new(),
                });
                self.found.len() - 1
            }
        };
        if let (Some(compared), Some(found)) = (compared, self.found.get_mut(at)) {
            found.compared.push(compared);
        }
    }

    fn expr(&mut self, e: &IdedExpr) {
        if matches!(e.expr, Expr::Select(_) | Expr::Call(_))
            && let Some(path) = self.path(e)
        {
            self.record(path, None);
            return;
        }
        match &e.expr {
            Expr::Call(call) => {
                let comparison = match call.func_name.as_str() {
                    operators::EQUALS => Some(true),
                    operators::NOT_EQUALS => Some(false),
                    _ => None,
                };
                if let (Some(equal), [left, right]) = (comparison, call.args.as_slice()) {
                    for (side, other) in [(left, right), (right, left)] {
                        if let (Some(path), Some(value)) =
                            (self.compared_path(side), literal_json(other))
                        {
                            let compared = if equal {
                                Compared::Equals(value)
                            } else {
                                Compared::NotEquals(value)
                            };
                            self.record(path, Some(compared));
                        }
                    }
                }
                if call.func_name == operators::IN
                    && let [left, right] = call.args.as_slice()
                    && let Some(path) = self.compared_path(left)
                    && let Expr::List(list) = &right.expr
                {
                    let values: Vec<Value> =
                        list.elements.iter().filter_map(literal_json).collect();
                    if !values.is_empty() {
                        self.record(path, Some(Compared::In(values)));
                    }
                }
                if let Some(target) = &call.target {
                    self.expr(target);
                }
                call.args.iter().for_each(|arg| self.expr(arg));
            }
            Expr::Comprehension(c) => {
                // kadmit's loops pass their range through the charge.
                let range = match &c.iter_range.expr {
                    Expr::Call(call) if call.func_name == RANGE_CHARGE => call.args.first(),
                    _ => Some(&c.iter_range),
                };
                let element = range
                    .and_then(|range| self.path(range))
                    .map(|(path, mut loops)| {
                        loops.push(path.clone());
                        (format!("{path}[*]"), loops)
                    });
                if let Some(range) = range {
                    self.expr(range);
                }
                self.expr(&c.accu_init);
                let bound = 2 + usize::from(c.iter_var2.is_some());
                self.locals.push((c.iter_var.clone(), element));
                self.locals
                    .extend(c.iter_var2.clone().map(|name| (name, None)));
                self.locals.push((c.accu_var.clone(), None));
                self.expr(&c.loop_cond);
                self.expr(&c.loop_step);
                self.expr(&c.result);
                self.locals
                    .truncate(self.locals.len().saturating_sub(bound));
            }
            Expr::List(_) | Expr::Map(_) | Expr::Select(_) | Expr::Struct(_) => {
                for_each_part(e, |part| self.expr(part));
            }
            Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
        }
    }
}

/// A member name as a JSONPath's quoted name writes it.
fn escape_name(name: &str) -> String {
    name.replace('\\', "\\\\").replace('\'', "\\'")
}

/// A literal of `e`, as JSON: `None` for anything else (and for bytes).
fn literal_json(e: &IdedExpr) -> Option<Value> {
    let Expr::Literal(literal) = &e.expr else {
        return None;
    };
    Some(match literal {
        LiteralValue::Boolean(b) => Value::Bool(*b.inner()),
        LiteralValue::Int(i) => Value::from(*i.inner()),
        LiteralValue::UInt(u) => Value::from(*u.inner()),
        LiteralValue::Double(d) => serde_json::Number::from_f64(*d.inner()).map(Value::Number)?,
        LiteralValue::String(text) => Value::String(text.inner().to_owned()),
        LiteralValue::Null => Value::Null,
        LiteralValue::Bytes(_) => return None,
    })
}

/// Calls `f` with each part of a list, map, selection or message
/// construction `e` (its elements, keys and values, operand, field
/// values); with nothing for any other expression.
fn for_each_part(e: &IdedExpr, mut f: impl FnMut(&IdedExpr)) {
    use ::cel::common::ast::EntryExpr;
    match &e.expr {
        Expr::List(list) => list.elements.iter().for_each(f),
        Expr::Map(map) => {
            for entry in &map.entries {
                if let EntryExpr::MapEntry(entry) = &entry.expr {
                    f(&entry.key);
                    f(&entry.value);
                }
            }
        }
        Expr::Select(select) => f(&select.operand),
        Expr::Struct(strct) => {
            for entry in &strct.entries {
                if let EntryExpr::StructField(field) = &entry.expr {
                    f(&field.value);
                }
            }
        }
        _ => {}
    }
}

/// How deep brackets and conditionals nest in `source`, not counting what
/// is inside string literals.
fn source_nesting(source: &str) -> usize {
    let (mut depth, mut deepest, mut conditionals) = (0usize, 0usize, 0usize);
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in source.chars() {
        if let Some(open) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == open {
                quote = None;
            }
            continue;
        }
        match c {
            '\'' | '"' => quote = Some(c),
            '(' | '[' | '{' => {
                depth += 1;
                deepest = deepest.max(depth + conditionals);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            '?' => {
                conditionals += 1;
                deepest = deepest.max(depth + conditionals);
            }
            _ => {}
        }
    }
    deepest
}

/// The node count of `e`.
fn node_count(e: &IdedExpr) -> u64 {
    let mut walk = Walk::new(&[], &[]);
    walk.expr(e);
    walk.nodes
}

// The comprehension macros. Each expands as the CEL specification defines
// (the accumulator `@result`, the same loop condition and step), with the
// range wrapped in `@kadmit_range(range, body nodes)`.

fn macros() -> Vec<Macro> {
    let mut macros = vec![
        Macro::global(operators::HAS, 1, |h, _, args| has(h, args).map(Some)),
        Macro::receiver(operators::ALL, 2, |h, target, args| {
            all_or_exists(h, target, args, true).map(Some)
        }),
        Macro::receiver(operators::EXISTS, 2, |h, target, args| {
            all_or_exists(h, target, args, false).map(Some)
        }),
        Macro::receiver(operators::EXISTS_ONE, 2, |h, target, args| {
            exists_one(h, target, args).map(Some)
        }),
        Macro::receiver("existsOne", 2, |h, target, args| {
            exists_one(h, target, args).map(Some)
        }),
        Macro::receiver(operators::MAP, 2, |h, target, args| {
            map(h, target, args).map(Some)
        }),
        Macro::receiver(operators::MAP, 3, |h, target, args| {
            map(h, target, args).map(Some)
        }),
        Macro::receiver(operators::FILTER, 2, |h, target, args| {
            filter(h, target, args).map(Some)
        }),
        Macro::receiver("replace", 2, |h, target, args| {
            Ok(Some(replace(h, target, args)))
        }),
        Macro::receiver("matches", 1, |h, target, args| {
            let mut operands: Vec<IdedExpr> = target.take().into_iter().collect();
            operands.append(args);
            Ok(Some(call(h, MATCHES, operands)))
        }),
        Macro::global("matches", 2, |h, _, args| {
            Ok(Some(call(h, MATCHES, std::mem::take(args))))
        }),
        Macro::receiver("replace", 3, |h, target, args| {
            Ok(Some(replace(h, target, args)))
        }),
        Macro::receiver("format", 1, |h, target, args| {
            Ok(Some(format(h, target, args)))
        }),
        // `strings.quote(s)` is a call of `quote` on the name `strings`.
        Macro::receiver("quote", 1, |h, target, args| {
            if !matches!(target.as_ref().map(|t| &t.expr), Some(Expr::Ident(name)) if name == "strings")
            {
                return Ok(None);
            }
            Ok(Some(call(h, QUOTE, std::mem::take(args))))
        }),
        // The parser builds `a + b` as a call of `_+_`, through the macros.
        Macro::global(operators::ADD, 2, |h, _, args| {
            Ok(Some(call(h, ADD, std::mem::take(args))))
        }),
    ];
    // The strings extension's functions kadmit runs its own way.
    for (function, arities, into) in [
        ("indexOf", [1, 2], INDEX_OF),
        ("lastIndexOf", [1, 2], LAST_INDEX_OF),
        ("split", [1, 2], SPLIT),
        ("join", [0, 1], JOIN),
    ] {
        for arity in arities {
            macros.push(Macro::receiver(function, arity, move |h, target, args| {
                Ok(Some(receiver_call(h, into, target, args)))
            }));
        }
    }
    macros
}

/// `s.replace(from, to[, n])` as `@kadmit_replace(s, from, to[, n])`.
fn replace(
    h: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> IdedExpr {
    receiver_call(h, REPLACE, target, args)
}

/// `s.format(args)` as a loop over the one element `args`, folded from
/// `s`: `@kadmit_format_charge(@result, @format_args).format(@format_args)`.
/// Each of `s` and `args` is evaluated once, and the extension's `format`
/// runs only once the charge is taken. Such a loop is not counted as a
/// comprehension's nesting (see [`Walk`]).
fn format(
    h: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> IdedExpr {
    let text = target.take().unwrap_or_default();
    let list = args.pop().unwrap_or_default();
    let range = h.next_expr(Expr::List(ListExpr::new(vec![list])));
    let accu = ident(h, ACCU);
    let arguments = ident(h, FORMAT_ARGS);
    let charged = call(h, FORMAT_CHARGE, vec![accu, arguments]);
    let arguments = ident(h, FORMAT_ARGS);
    let step = h.next_expr(Expr::Call(CallExpr {
        func_name: "format".to_owned(),
        target: Some(Box::new(charged)),
        args: vec![arguments],
    }));
    let condition = literal(h, LiteralValue::Boolean(true.into()));
    let result = ident(h, ACCU);
    h.next_expr(Expr::Comprehension(Box::new(ComprehensionExpr {
        iter_range: range,
        iter_var: FORMAT_ARGS.to_owned(),
        iter_var2: None,
        accu_var: ACCU.to_owned(),
        accu_init: text,
        loop_cond: condition,
        loop_step: step,
        result,
    })))
}

/// `target.f(args…)` as `function(target, args…)`.
fn receiver_call(
    h: &mut MacroExprHelper<'_>,
    function: &str,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> IdedExpr {
    let mut operands: Vec<IdedExpr> = target.take().into_iter().collect();
    operands.append(args);
    call(h, function, operands)
}

const ACCU: &str = "@result";

fn has(h: &mut MacroExprHelper<'_>, args: &mut Vec<IdedExpr>) -> Result<IdedExpr, ParseError> {
    let arg = args.pop().unwrap_or_default();
    match arg.expr {
        Expr::Select(mut select) => {
            select.test = true;
            Ok(h.next_expr(Expr::Select(select)))
        }
        _ => Err(h.new_error(
            arg.id,
            "has() takes a field selection, e.g. has(object.spec.x)",
        )),
    }
}

/// The loop variable: the first argument, a plain name.
fn loop_variable(h: &MacroExprHelper<'_>, arg: IdedExpr) -> Result<String, ParseError> {
    match arg.expr {
        Expr::Ident(name) => Ok(name),
        _ => Err(h.new_error(arg.id, "the loop variable must be a simple name")),
    }
}

fn ident(h: &mut MacroExprHelper<'_>, name: &str) -> IdedExpr {
    h.next_expr(Expr::Ident(name.to_owned()))
}

fn call(h: &mut MacroExprHelper<'_>, function: &str, args: Vec<IdedExpr>) -> IdedExpr {
    h.next_expr(Expr::Call(CallExpr {
        func_name: function.to_owned(),
        target: None,
        args,
    }))
}

fn literal(h: &mut MacroExprHelper<'_>, value: LiteralValue) -> IdedExpr {
    h.next_expr(Expr::Literal(value))
}

/// The comprehension over `range` with the body `parts` (whose nodes are
/// charged per element).
#[allow(clippy::too_many_arguments)]
fn comprehension(
    h: &mut MacroExprHelper<'_>,
    range: IdedExpr,
    variable: String,
    init: IdedExpr,
    condition: IdedExpr,
    step: IdedExpr,
    result: IdedExpr,
) -> IdedExpr {
    let body = node_count(&condition) + node_count(&step) + node_count(&result);
    let body = literal(
        h,
        LiteralValue::Int(i64::try_from(body).unwrap_or(i64::MAX).into()),
    );
    let range = call(h, RANGE_CHARGE, vec![range, body]);
    h.next_expr(Expr::Comprehension(Box::new(ComprehensionExpr {
        iter_range: range,
        iter_var: variable,
        iter_var2: None,
        accu_var: ACCU.to_owned(),
        accu_init: init,
        loop_cond: condition,
        loop_step: step,
        result,
    })))
}

/// Takes the target and the two or three arguments of a macro call:
/// (range, loop variable, the other arguments in order).
fn parts(
    h: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> Result<(IdedExpr, String, Vec<IdedExpr>), ParseError> {
    let range = target.take().unwrap_or_default();
    let mut rest = std::mem::take(args);
    if rest.is_empty() {
        return Err(h.new_error(range.id, "a loop variable is missing"));
    }
    let variable = loop_variable(h, rest.remove(0))?;
    Ok((range, variable, rest))
}

fn all_or_exists(
    h: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
    all: bool,
) -> Result<IdedExpr, ParseError> {
    let (range, variable, mut rest) = parts(h, target, args)?;
    let predicate = rest.pop().unwrap_or_default();
    let init = literal(h, LiteralValue::Boolean(all.into()));
    let accu = ident(h, ACCU);
    let not_decided = if all {
        call(h, operators::NOT_STRICTLY_FALSE, vec![accu])
    } else {
        let negated = call(h, operators::LOGICAL_NOT, vec![accu]);
        call(h, operators::NOT_STRICTLY_FALSE, vec![negated])
    };
    let accu = ident(h, ACCU);
    let fold = if all {
        operators::LOGICAL_AND
    } else {
        operators::LOGICAL_OR
    };
    let step = call(h, fold, vec![accu, predicate]);
    let result = ident(h, ACCU);
    Ok(comprehension(
        h,
        range,
        variable,
        init,
        not_decided,
        step,
        result,
    ))
}

fn exists_one(
    h: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> Result<IdedExpr, ParseError> {
    let (range, variable, mut rest) = parts(h, target, args)?;
    let predicate = rest.pop().unwrap_or_default();
    let init = literal(h, LiteralValue::Int(0.into()));
    let condition = literal(h, LiteralValue::Boolean(true.into()));
    let accu = ident(h, ACCU);
    let one = literal(h, LiteralValue::Int(1.into()));
    let counted = call(h, operators::ADD, vec![accu, one]);
    let accu = ident(h, ACCU);
    let step = call(h, operators::CONDITIONAL, vec![predicate, counted, accu]);
    let accu = ident(h, ACCU);
    let one = literal(h, LiteralValue::Int(1.into()));
    let result = call(h, operators::EQUALS, vec![accu, one]);
    Ok(comprehension(
        h, range, variable, init, condition, step, result,
    ))
}

/// `range.map(v, f)` and `range.map(v, p, f)`.
fn map(
    h: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> Result<IdedExpr, ParseError> {
    let (range, variable, mut rest) = parts(h, target, args)?;
    let transform = rest.pop().unwrap_or_default();
    let guard = rest.pop();
    Ok(list_of(h, range, variable, guard, transform))
}

/// `range.filter(v, p)`: `range.map(v, p, v)`.
fn filter(
    h: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> Result<IdedExpr, ParseError> {
    let (range, variable, mut rest) = parts(h, target, args)?;
    let predicate = rest.pop().unwrap_or_default();
    let element = ident(h, &variable);
    Ok(list_of(h, range, variable, Some(predicate), element))
}

/// The list of `item` for each element of `range` (bound to `variable`)
/// for which `guard` holds, as `map` and `filter` expand.
fn list_of(
    h: &mut MacroExprHelper<'_>,
    range: IdedExpr,
    variable: String,
    guard: Option<IdedExpr>,
    item: IdedExpr,
) -> IdedExpr {
    let init = h.next_expr(Expr::List(ListExpr::new(Vec::new())));
    let condition = literal(h, LiteralValue::Boolean(true.into()));
    let accu = ident(h, ACCU);
    let item = call(h, COPY_CHARGE, vec![item]);
    let item = h.next_expr(Expr::List(ListExpr::new(vec![item])));
    let mut step = call(h, operators::ADD, vec![accu, item]);
    if let Some(guard) = guard {
        let accu = ident(h, ACCU);
        step = call(h, operators::CONDITIONAL, vec![guard, step, accu]);
    }
    let result = ident(h, ACCU);
    comprehension(h, range, variable, init, condition, step, result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::budget::{DEFAULT_MAX_STEPS, Exceeded, Limits};
    use serde_json::json;

    fn run(
        source: &str,
        object: &Value,
        max_steps: u64,
    ) -> (Result<::cel::Value, Failure>, Budget) {
        let expression = Expression::compile(source, &[]).expect("compiles");
        let budget = Budget::new(Limits {
            max_steps,
            ..Limits::DEFAULT
        });
        let result = expression.evaluate(
            |variable| (variable == Variable::Object).then_some(object),
            &budget,
        );
        (result, budget)
    }

    /// A ConfigMap `c` in namespace `team-a` of about 700 KB: 40,000 keys of
    /// eight-byte strings.
    fn configmap_of_700_kb() -> Value {
        let mut configmap = json!({"metadata": {"name": "c", "namespace": "team-a"}});
        configmap["data"] = (0..40_000)
            .map(|i| (format!("key-{i:06}"), json!("v".repeat(8))))
            .collect::<serde_json::Map<_, _>>()
            .into();
        configmap
    }

    /// A ConfigMap whose `data` holds `keys` empty maps.
    fn configmap_of_empty_maps(keys: usize) -> Value {
        let data: serde_json::Map<String, Value> =
            (0..keys).map(|i| (format!("k{i}"), json!({}))).collect();
        json!({"metadata": {"name": "c"}, "data": data})
    }

    #[test]
    fn what_map_and_filter_append_is_charged_as_it_is_copied() {
        // Each item is a copy of the whole object: 1,150 keys made 1.7 GB
        // of copies within the budget when only the body's nodes counted.
        let source = "object.data.map(k, [object, object, object, object]).size() == 0";
        let (result, budget) = run(source, &configmap_of_empty_maps(1_150), DEFAULT_MAX_STEPS);
        assert_eq!(result, Err(Failure::OverBudget));
        assert!(budget.exceeded().is_some());
        // A small object is evaluated, and the charge grows with the copies.
        let small = configmap_of_empty_maps(3);
        let (result, one) = run(source, &small, DEFAULT_MAX_STEPS);
        assert_eq!(result, Ok(::cel::Value::Bool(false)));
        let (_, names) = run(
            "object.data.map(k, k).size() == 0",
            &small,
            DEFAULT_MAX_STEPS,
        );
        assert!(
            one.steps() > names.steps() + 4 * 3 * VALUE_STEPS,
            "{}",
            one.steps()
        );
        // filter appends the elements themselves, charged alike.
        let (result, _) = run(
            "object.data.filter(k, k != '').size() == 3",
            &small,
            DEFAULT_MAX_STEPS,
        );
        assert_eq!(result, Ok(::cel::Value::Bool(true)));
    }

    #[test]
    fn literals_of_variables_are_charged_as_copies_of_them() {
        // Each `object` in the list is a copy of it: 120 of a 350 KB object
        // held 1.9 GB, within the charge per node.
        let large = json!({"metadata": {"name": "c"}, "x": vec![json!({"": 0}); 50_000]});
        let source = format!("[{}].size() == 0", vec!["object"; 30].join(", "));
        let (result, budget) = run(&source, &large, DEFAULT_MAX_STEPS);
        assert_eq!(result, Err(Failure::OverBudget));
        assert!(budget.exceeded().is_some());
        // On an ordinary object such literals are cheap, and constants cost
        // nothing more.
        let small = configmap_of_empty_maps(3);
        let (result, budget) = run(
            "[object.metadata.name, 'a'].exists(n, n == 'c')",
            &small,
            DEFAULT_MAX_STEPS,
        );
        assert_eq!(result, Ok(::cel::Value::Bool(true)));
        assert!(budget.steps() < 10_000, "{}", budget.steps());
        let (_, constants) = run("['a', 'b'].exists(n, n == 'c')", &small, DEFAULT_MAX_STEPS);
        let (_, copies) = run(
            "[object.metadata.name, 'b'].exists(n, n == 'c')",
            &small,
            DEFAULT_MAX_STEPS,
        );
        assert!(copies.steps() > constants.steps(), "{}", copies.steps());
        // Map literals' keys and values are copies too.
        let source = format!(
            "{{{}}}.size() == 0",
            (0..30)
                .map(|i| format!("'k{i}': object"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let (result, _) = run(&source, &large, DEFAULT_MAX_STEPS);
        assert_eq!(result, Err(Failure::OverBudget));
    }

    /// An optional is copied with what it holds, and charged so: lists of
    /// `object.?x` held 60 copies of a 180 KB object uncharged, and sums of
    /// them 4 GB, admitted.
    #[test]
    fn optionals_are_charged_as_what_they_hold() {
        let large = json!({"metadata": {"name": "c"}, "x": vec![json!({}); 60_000]});
        let sixty = (0..60)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        for source in [
            format!("[{sixty}].map(i, object.?x).size() == 0"),
            format!("[{}].size() == 0", vec!["object.?x"; 30].join(", ")),
            format!(
                "[[{}]].all(l, ({}).size() == 0)",
                ["object.?x"; 8].join(", "),
                ["l"; 10].join(" + ")
            ),
        ] {
            let (result, budget) = run(&source, &large, DEFAULT_MAX_STEPS);
            assert_eq!(result, Err(Failure::OverBudget), "{source}");
            assert!(budget.exceeded().is_some(), "{source}");
        }
        // An optional of a small value stays cheap.
        let (result, budget) = run(
            "[object.?metadata.name, object.?nothing].size() == 2",
            &large,
            DEFAULT_MAX_STEPS,
        );
        assert_eq!(result, Ok(::cel::Value::Bool(true)));
        assert!(budget.steps() < DEFAULT_MAX_STEPS / 2, "{}", budget.steps());
    }

    /// A string of a million `a`s, made by `replace` from a short literal:
    /// charged once as it is made, and small among the variables.
    const MILLION: &str = "'aaaaaaaaaa'.replace('a', 'aaaaaaaaaa').replace('a', 'aaaaaaaaaa')\
        .replace('a', 'aaaaaaaaaa').replace('a', 'aaaaaaaaaa').replace('a', 'aaaaaaaaaa')";

    /// A value made during the evaluation is read at the charge of a
    /// variable of its size: `reverse` of a 1 MB string made by `replace`
    /// in nested loops took 10 s within the budget (a 403, no 413), and
    /// thirty nested `indexOf(d.reverse(), …)` of a 4 MB one held 300 MB.
    #[test]
    fn values_made_while_evaluating_are_charged_as_variables_of_their_size() {
        let small = json!({"metadata": {"name": "c"}});
        let thirty = (0..30)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let nested = (0..10).fold("0".to_owned(), |inner, _| {
            format!("d.reverse().indexOf(d.reverse(), {inner})")
        });
        for source in [
            format!("[{MILLION}].all(d, [{thirty}].all(x, [{thirty}].all(y, d.reverse() != '')))"),
            format!("[{MILLION}].all(d, [{thirty}].all(x, [{thirty}].all(y, d.indexOf('b') < 0)))"),
            format!("[{MILLION}].all(d, [{thirty}].all(x, [{thirty}].all(y, d == d)))"),
            format!("[{MILLION}].all(d, {nested} == 0)"),
        ] {
            let (result, budget) = run(&source, &small, DEFAULT_MAX_STEPS);
            assert_eq!(result, Err(Failure::OverBudget), "{source}");
            assert!(budget.exceeded().is_some(), "{source}");
        }
        // Made once and read a few times, it is within the budget.
        let (result, _) = run(
            &format!("[{MILLION}].all(d, d.reverse().size() == 1000000)"),
            &small,
            DEFAULT_MAX_STEPS,
        );
        assert_eq!(result, Ok(::cel::Value::Bool(true)));
        // Calls on small parts of a large object stay cheap.
        let large = configmap_of_700_kb();
        let (plain, plain_budget) = run(
            "object.metadata.name == 'c' && object.metadata.namespace == 'team-a'",
            &large,
            DEFAULT_MAX_STEPS,
        );
        let (calls, calls_budget) = run(
            "object.metadata.name.upperAscii() == 'C' && object.metadata.namespace.lowerAscii() == 'team-a'",
            &large,
            DEFAULT_MAX_STEPS,
        );
        assert_eq!(
            (plain, calls.clone()),
            (Ok(::cel::Value::Bool(true)), Ok(::cel::Value::Bool(true)))
        );
        assert!(
            calls_budget.steps() < 2 * plain_budget.steps(),
            "{} against {}",
            calls_budget.steps(),
            plain_budget.steps()
        );
    }

    /// A literal's element is charged by the size of what it copies, not
    /// of every variable: a short name read from a large object is cheap
    /// (charging each element the size of all variables denied such
    /// expressions on UPDATEs of objects of about 700 KB).
    #[test]
    fn a_literal_of_a_short_field_of_a_large_object_is_cheap() {
        let large = configmap_of_700_kb();
        let size = serde_json::to_vec(&large).map_or(0, |bytes| bytes.len());
        assert!(size > 700_000, "{size}");
        let only_nodes = run(
            "object.metadata.namespace == 'team-a' || object.metadata.namespace == 'default'",
            &large,
            DEFAULT_MAX_STEPS,
        );
        let (result, budget) = run(
            "object.metadata.namespace in [object.metadata.name, 'default', object.metadata.namespace]",
            &large,
            DEFAULT_MAX_STEPS,
        );
        assert_eq!(result, Ok(::cel::Value::Bool(true)));
        assert_eq!(only_nodes.0, Ok(::cel::Value::Bool(true)));
        // The same order as an expression of as many nodes without a
        // literal: the two copies cost a step per byte of two short names.
        assert!(
            budget.steps() < 2 * only_nodes.1.steps(),
            "{} against {}",
            budget.steps(),
            only_nodes.1.steps()
        );
    }

    #[test]
    fn variables_past_the_steps_the_budget_leaves_are_not_made() {
        let expression = Expression::compile("size(object.items) > 0", &[]).expect("compiles");
        let object = json!({"items": vec!["x"; 100_000]});
        // Within the budget: every value is made.
        VALUES_MADE.set(0);
        let budget = Budget::new(Limits::DEFAULT);
        assert_eq!(expression.holds(|_| Some(&object), &budget), Ok(true));
        assert!(VALUES_MADE.get() > 100_000);
        // 10,000 steps left pay for about 320 KB of reading, the 100,000
        // items 900 KB: making them stops there.
        VALUES_MADE.set(0);
        let budget = Budget::new(Limits {
            max_steps: 10_000,
            ..Limits::DEFAULT
        });
        assert_eq!(
            expression.holds(|_| Some(&object), &budget),
            Err(Failure::OverBudget)
        );
        assert!(matches!(budget.exceeded(), Some(Exceeded::Steps(_))));
        assert!(VALUES_MADE.get() < 40_001, "{}", VALUES_MADE.get());
        // Spent before: none is made.
        VALUES_MADE.set(0);
        let budget = Budget::new(Limits::DEFAULT);
        budget.charge(u64::MAX);
        assert_eq!(
            expression.holds(|_| Some(&object), &budget),
            Err(Failure::OverBudget)
        );
        assert_eq!(VALUES_MADE.get(), 0);
    }

    #[test]
    fn variables_past_the_memory_the_budget_leaves_are_not_made() {
        let expression = Expression::compile("has(object.data.k0)", &[]).expect("compiles");
        let object = configmap_of_empty_maps(1_000);
        let budget = Budget::new(Limits::DEFAULT);
        assert_eq!(
            expression.evaluate(|_| Some(&object), &budget),
            Ok(::cel::Value::Bool(true))
        );
        // With all but 10 KB held, 1,000 entries (over 80 KB) are refused.
        let budget = Budget::new(Limits::DEFAULT);
        budget.hold(crate::eval::budget::MAX_CONVERTED_BYTES - 10_000);
        assert_eq!(
            expression.evaluate(|_| Some(&object), &budget),
            Err(Failure::OverBudget)
        );
        assert_eq!(
            budget.exceeded(),
            Some(crate::eval::budget::Exceeded::ConvertedBytes(
                crate::eval::budget::MAX_CONVERTED_BYTES
            ))
        );
    }

    #[test]
    fn evaluates_the_macros_as_the_specification_defines_them() {
        let pod = json!({"spec": {"containers": [
            {"name": "a", "image": "nginx"}, {"name": "b", "image": "redis", "ports": [1]}
        ]}});
        for (source, expected) in [
            ("object.spec.containers.all(c, c.name.size() == 1)", true),
            ("object.spec.containers.exists(c, c.image == 'redis')", true),
            ("object.spec.containers.exists_one(c, has(c.ports))", true),
            ("object.spec.containers.existsOne(c, c.name != '')", false),
            ("object.spec.containers.map(c, c.name) == ['a', 'b']", true),
            (
                "object.spec.containers.map(c, has(c.ports), c.name) == ['b']",
                true,
            ),
            (
                "object.spec.containers.filter(c, c.image.startsWith('n')).size() == 1",
                true,
            ),
            ("'Nginx'.lowerAscii() == 'nginx'", true),
            // The extension's one namespaced function.
            ("strings.quote('a\"b') == '\"a\\\\\"b\"'", true),
            ("!has(object.metadata)", true),
        ] {
            let (result, _) = run(source, &pod, 1_000_000);
            assert_eq!(result, Ok(::cel::Value::Bool(expected)), "{source}");
        }
    }

    #[test]
    fn compile_errors_say_what_and_where() {
        let syntax = Expression::compile("object.spec.(", &[]).unwrap_err();
        assert!(syntax.message.contains("of the expression"), "{syntax:?}");
        let unknown = Expression::compile("objekt.spec == 1", &[]).unwrap_err();
        assert_eq!(unknown.message, "unknown variable `objekt`");
        let element = Expression::compile("element.name == 'a'", &[]).unwrap_err();
        assert!(element.message.contains("`element`"), "{element:?}");
        let bound = Expression::compile("c.name == element.name", &[Some("c".to_owned())]);
        assert!(bound.is_ok(), "{bound:?}");
        let long = "1 + ".repeat(MAX_SOURCE_BYTES / 4) + "1";
        assert!(Expression::compile(&long, &[]).is_err());
        let nested = "[1].all(a, [1].all(b, [1].all(c, [1].all(d, true))))";
        let error = Expression::compile(nested, &[]).unwrap_err();
        assert!(error.message.contains("nest 4 deep"), "{error:?}");
    }

    #[test]
    fn a_function_the_environment_lacks_is_a_compile_error() {
        // Each compiled, and then failed every review it ran on.
        for (source, name) in [
            (
                "timestamp(object.metadata.creationTimestamp) < timestamp('2020-01-01T00:00:00Z')",
                "timestamp",
            ),
            ("object.metadata.name.frobnicate() == 'a'", "frobnicate"),
            ("size(object.spec) > 0 && isSorted([1])", "isSorted"),
            ("strings.nothing('a') == 'a'", "strings.nothing"),
        ] {
            let error = Expression::compile(source, &[]).unwrap_err();
            assert_eq!(
                error.message,
                format!("unknown function `{name}`"),
                "{source}"
            );
        }
        // Functions the environment has, called as the documentation says,
        // global, member and from the extensions.
        for source in [
            "size(object.spec) > 0 && object.metadata.name.startsWith('a')",
            "object.metadata.name.lowerAscii().split('-').size() == 2",
            "quantity('1Gi').isGreaterThan(quantity(object.spec.limit))",
            "object.metadata.name.matches('^a') && string(1) == '1' && int('2') == 2",
            "[1, 2].map(x, x + 1).exists(y, y == 3) && 'a' in ['a']",
        ] {
            let compiled = Expression::compile(source, &[]);
            assert!(compiled.is_ok(), "{source}: {compiled:?}");
        }
        let patch = Expression::compile_patch(
            "lists.range(2).map(i, jsonpatch.escapeKey('a/b'))",
            Bounds::RULE_FILES,
        );
        assert!(patch.is_ok(), "{patch:?}");
    }

    #[test]
    fn a_quadratic_expression_over_a_large_list_stops_at_the_budget() {
        let items: Vec<Value> = (0..20_000).map(Value::from).collect();
        let object = json!({"items": items});
        let source = "object.items.all(a, object.items.exists(b, a == b))";
        let (result, budget) = run(source, &object, 10_000_000);
        assert_eq!(result, Err(Failure::OverBudget));
        assert!(budget.exceeded().is_some());
        // The same expression on a small list runs.
        let small = json!({"items": [1, 2, 3]});
        let (result, budget) = run(source, &small, 10_000_000);
        assert_eq!(result, Ok(::cel::Value::Bool(true)));
        assert!(budget.exceeded().is_none());
        assert!(budget.steps() > 0, "the work was charged");
    }

    #[test]
    fn replace_is_the_strings_extension_s_and_pays_for_what_it_makes() {
        for (source, expected) in [
            ("'hello hello'.replace('he', 'we')", "wello wello"),
            ("'hello hello'.replace('he', 'we', -1)", "wello wello"),
            ("'hello hello'.replace('he', 'we', 1)", "wello hello"),
            ("'hello hello'.replace('he', 'we', 0)", "hello hello"),
            ("'héllo'.replace('', '_')", "_h_é_l_l_o_"),
            ("'hello'.replace('l', '')", "heo"),
            ("object.s.replace('a', 'bb').replace('b', 'c')", "cccc"),
        ] {
            let (result, budget) = run(source, &json!({"s": "aa"}), 1_000_000);
            assert_eq!(
                result,
                Ok(::cel::Value::String(Arc::new(expected.to_owned()))),
                "{source}"
            );
            assert!(budget.steps() > expected.len() as u64, "{source}");
        }
        let (result, _) = run("'a'.replace(1, 'b')", &Value::Null, 1000);
        assert!(matches!(result, Err(Failure::Error(_))), "{result:?}");

        // Each replace here makes sixteen times the string before it: the
        // last would be 64 GiB. It stops at the budget before allocating.
        let chained = format!(
            "'{}'{}.size() > 0",
            "a".repeat(16),
            ".replace('a', 'aaaaaaaaaaaaaaaa')".repeat(8)
        );
        let (result, budget) = run(
            &chained,
            &Value::Null,
            crate::eval::budget::DEFAULT_MAX_STEPS,
        );
        assert_eq!(result, Err(Failure::OverBudget));
        assert!(budget.exceeded().is_some());
        // A request's strings multiplied: 40,000 × 40,000 bytes.
        let object = json!({"a": "x".repeat(40_000), "b": "y".repeat(40_000)});
        let (result, _) = run(
            "object.a.replace('x', object.b).size() > 0",
            &object,
            crate::eval::budget::DEFAULT_MAX_STEPS,
        );
        assert_eq!(result, Err(Failure::OverBudget));
    }

    /// What `source` gives with the `cel` crate's own strings extension
    /// (no kadmit macros), errors as [`Expression::evaluate`] words them.
    fn with_the_extension(source: &str, object: &Value) -> Result<::cel::Value, String> {
        let mut env = Env::default().with_stdlib();
        env.add_extension(::cel::extensions::strings)
            .expect("registers");
        let program = env.compile(source).expect("compiles");
        let mut context = Context::with_env(Arc::new(env));
        let mut size = Size {
            bytes: 0,
            memory: 0,
            limit: u64::MAX,
            max_bytes: u64::MAX,
        };
        context.add_variable_as_val("object", to_val(object, &mut size).expect("no limit"));
        program
            .execute(&context)
            .map_err(|error| shown_within(error, MAX_MESSAGE_BYTES))
    }

    /// `source` with kadmit's functions, as [`with_the_extension`] gives it.
    fn with_kadmit(source: &str, object: &Value) -> Result<::cel::Value, String> {
        run(source, object, crate::eval::budget::DEFAULT_MAX_STEPS)
            .0
            .map_err(|failure| match failure {
                Failure::Error(message) => message,
                Failure::OverBudget => "over budget".to_owned(),
            })
    }

    #[test]
    fn format_and_quote_are_the_extension_s_and_pay_for_what_they_make() {
        let object = json!({"s": "a\\b\"c\n", "n": 2, "l": ["x", {"k": 1.5}], "b": "%s"});
        for source in [
            "'%s-%d'.format([object.s, object.n])",
            "'%s %s'.format([object.l, object.l[1]])",
            "'%%|%x|%X|%o|%b'.format([object.s, 255, 8, 5])",
            "'%.3f %e %d'.format([1.5, 123.456, 2.0])",
            "object.b.format([object.n])",
            "'%s %s'.format([1])",
            "'%d'.format(['a'])",
            "'%q'.format([1])",
            "'no clauses'.format([])",
            "strings.quote(object.s)",
            "strings.quote('\\a\\b\\f\\v\\t é')",
            "strings.quote(strings.quote(object.s))",
        ] {
            assert_eq!(
                with_kadmit(source, &object),
                with_the_extension(source, &object),
                "{source}"
            );
        }
        // Inside loops (which the crate's own macros do not run here).
        for (source, expected) in [
            ("[object.s].map(x, '<%s>'.format([x]))[0]", "<a\\b\"c\n>"),
            (
                "[1, 2].map(x, [3].map(y, [4].map(z, '%d%d%d'.format([x, y, z]))))[1][0][0]",
                "234",
            ),
        ] {
            assert_eq!(
                with_kadmit(source, &object),
                Ok(::cel::Value::String(Arc::new(expected.to_owned()))),
                "{source}"
            );
        }
        // Three comprehensions may nest, and a format inside them is no
        // fourth.
        let nested = "[1].all(x, [2].all(y, [3].all(z, '%d'.format([z]) == '3')))";
        assert!(Expression::compile(nested, &[]).is_ok());
        // Quotes of quotes double a string of backslashes at each level;
        // formats of formats in chained maps multiply it eight times.
        let quotes = format!(
            "size({}object.s{}) > 0",
            "strings.quote(".repeat(20),
            ")".repeat(20)
        );
        let formats = format!(
            "[object.s]{}[0].size() > 0",
            ".map(x, '%s%s%s%s%s%s%s%s'.format([x, x, x, x, x, x, x, x]))".repeat(8)
        );
        let backslashes = json!({"s": "\\".repeat(256)});
        for source in [&quotes, &formats] {
            let (result, budget) =
                run(source, &backslashes, crate::eval::budget::DEFAULT_MAX_STEPS);
            assert_eq!(result, Err(Failure::OverBudget), "{source}");
            assert!(budget.exceeded().is_some());
        }
        // One format whose clauses repeat a large argument is charged
        // before it writes.
        let large = json!({"s": "x".repeat(1 << 20)});
        let (result, _) = run(
            &format!(
                "'{}'.format([{}]).size() > 0",
                "%s".repeat(16),
                ["object.s"; 16].join(", ")
            ),
            &large,
            crate::eval::budget::DEFAULT_MAX_STEPS,
        );
        assert_eq!(result, Err(Failure::OverBudget));
    }

    #[test]
    fn plus_is_the_interpreter_s_and_pays_for_what_it_copies() {
        let object = json!({"s": "ab", "l": ["x", {"k": "v"}], "n": 2, "m": {"a": 1}});
        for source in [
            "1 + 2",
            "1u + 2u",
            "1.5 + 2",
            "1.5 + 2.5",
            "9223372036854775807 + 1",
            "object.n + 1",
            "object.s + 'cd' + object.s",
            "b'ab' + b'c'",
            "object.l + object.l",
            "[1] + [] + [[2]]",
            "1 + 'a'",
            "object.m + object.m",
            "null + 1",
        ] {
            assert_eq!(
                with_kadmit(source, &object),
                with_the_extension(source, &object),
                "{source}"
            );
        }
        // A string sum is charged a step per byte it copies; numbers are not.
        let (_, numbers) = run("1 + 2 + 3", &Value::Null, 1_000_000);
        let long = json!({"s": "a".repeat(10_000)});
        let (result, strings) = run("(object.s + object.s).size()", &long, 1_000_000);
        assert_eq!(result, Ok(::cel::Value::Int(20_000)));
        assert!(
            strings.steps() >= numbers.steps() + 20_000,
            "{}",
            strings.steps()
        );

        // Each map makes a string eight times as long: eight of them made
        // 84 MB from a five-byte name, charged a few hundred steps.
        let chain = ".map(x, x + x + x + x + x + x + x + x)".repeat(8);
        let source = format!("[object.metadata.name]{chain}.size() > 0");
        let object = json!({"metadata": {"name": "web-1"}});
        let (result, budget) = run(&source, &object, crate::eval::budget::DEFAULT_MAX_STEPS);
        assert_eq!(result, Err(Failure::OverBudget));
        assert!(budget.exceeded().is_some());
        // Lists of strings copied into larger lists are charged the strings.
        let chain = ".map(x, x + x + x + x)".repeat(8);
        let source = format!("[[object.metadata.name]]{chain}.size() > 0");
        let (result, _) = run(&source, &object, crate::eval::budget::DEFAULT_MAX_STEPS);
        assert_eq!(result, Err(Failure::OverBudget));
    }

    #[test]
    fn index_of_and_last_index_of_are_the_extension_s_in_linear_time() {
        let object = json!({"ascii": "hello mellow", "wide": "héllo wörld ü ö"});
        for text in ["object.ascii", "object.wide", "''", "'éa'", "'aéa'"] {
            for function in ["indexOf", "lastIndexOf"] {
                for needle in ["'l'", "'ello'", "'ö'", "'é'", "'a'", "'aé'", "''", "'zz'"] {
                    for from in [
                        "", ", 0", ", 1", ", 3", ", 11", ", 12", ", 14", ", 15", ", -1",
                    ] {
                        let source = format!("{text}.{function}({needle}{from})");
                        assert_eq!(
                            with_kadmit(&source, &object),
                            with_the_extension(&source, &object),
                            "{source}"
                        );
                    }
                }
            }
        }
        let (result, _) = run("'a'.indexOf(1)", &Value::Null, 1000);
        assert!(matches!(result, Err(Failure::Error(_))), "{result:?}");

        // The extension compares the needle at every position: 11.9 s here
        // (debug build). `str::find` takes milliseconds.
        let haystack = "a".repeat(700_000);
        let object = json!({"a": haystack, "b": format!("{}b", "a".repeat(350_000))});
        let started = std::time::Instant::now();
        for source in [
            "object.a.indexOf(object.b)",
            "object.a.lastIndexOf(object.b)",
            "object.a.indexOf(object.b, 1)",
            "object.a.lastIndexOf(object.b, 600000)",
        ] {
            let (result, _) = run(source, &object, crate::eval::budget::DEFAULT_MAX_STEPS);
            assert_eq!(result, Ok(::cel::Value::Int(-1)), "{source}");
        }
        let (result, _) = run(
            "(object.a + object.b).lastIndexOf(object.b)",
            &object,
            crate::eval::budget::DEFAULT_MAX_STEPS,
        );
        assert_eq!(result, Ok(::cel::Value::Int(700_000)));
        let elapsed = started.elapsed();
        assert!(elapsed.as_secs() < 5, "took {elapsed:?}");
    }

    #[test]
    fn split_and_join_are_the_extension_s_and_pay_for_what_they_make() {
        let object = json!({"s": "a,b,,c", "w": "é,ü,,ö", "l": ["x", "yz", ""]});
        for source in [
            "object.s.split(',')",
            "object.w.split(',')",
            "object.w.split('')",
            "object.s.split('')",
            "''.split('')",
            "''.split(',')",
            "object.s.split('zz')",
        ]
        .into_iter()
        .flat_map(|split| {
            ["", ", 0", ", 1", ", 2", ", 3", ", 10", ", -1"]
                .map(|n| format!("{}{n})", split.trim_end_matches(')')))
        })
        .chain(
            [
                "object.l.join()",
                "object.l.join('--')",
                "[].join(',')",
                "['é'].join('ü')",
                "[1].join(',')",
            ]
            .map(str::to_owned),
        ) {
            assert_eq!(
                with_kadmit(&source, &object),
                with_the_extension(&source, &object),
                "{source}"
            );
        }
        let (result, _) = run("'a'.split(1)", &Value::Null, 1000);
        assert!(matches!(result, Err(Failure::Error(_))), "{result:?}");
        // Charged per part and per byte of what is made.
        let (result, budget) = run("'a,b,c'.split(',').size()", &Value::Null, 1_000_000);
        assert_eq!(result, Ok(::cel::Value::Int(3)));
        assert!(budget.steps() >= 3 * VALUE_STEPS + 5, "{}", budget.steps());

        // 3.1 million one-character strings took 231 MB for one review,
        // charged a million steps: now over the budget before any is made.
        let object = json!({"s": "a".repeat(3_100_000)});
        let (result, budget) = run(
            "object.s.split('').size() > 0",
            &object,
            crate::eval::budget::DEFAULT_MAX_STEPS,
        );
        assert_eq!(result, Err(Failure::OverBudget));
        assert!(budget.exceeded().is_some());
        // Many short strings joined by a long separator: 10,000 × 10,000
        // bytes from 20 KB.
        let object = json!({"l": vec!["a"; 10_000], "sep": "s".repeat(10_000)});
        let (result, _) = run(
            "object.l.join(object.sep).size() > 0",
            &object,
            crate::eval::budget::DEFAULT_MAX_STEPS,
        );
        assert_eq!(result, Err(Failure::OverBudget));
    }

    #[test]
    fn matches_is_cel_s_with_a_bounded_regex_charged_for_what_it_reads() {
        for (source, expected) in [
            ("'team-a'.matches('^team-[a-z]$')", true),
            ("matches('team-a', '^team-[a-z]$')", true),
            ("'team-1'.matches('^team-[a-z]$')", false),
            ("object.s.matches(object.re)", true),
            ("['a1', 'b2'].all(x, x.matches('[0-9]'))", true),
        ] {
            let object = json!({"s": "web-1", "re": "-[0-9]+$"});
            let (result, _) = run(source, &object, 1_000_000);
            assert_eq!(result, Ok(::cel::Value::Bool(expected)), "{source}");
        }
        // A pattern from the request that would compile to about 6 MB is
        // refused, naming itself; an invalid one too.
        for pattern in [r"\w{100}", "(unclosed"] {
            let (result, _) = run(
                "object.s.matches(object.re)",
                &json!({"s": "x", "re": pattern}),
                1_000_000,
            );
            assert!(
                matches!(&result, Err(Failure::Error(m)) if m.contains("is not a usable regex")),
                "{pattern}: {result:?}"
            );
        }
        // A pattern over 4 KiB is not compiled at all: 100 KB of `a?` took
        // 320 ms to be refused by the regex crate.
        let (result, _) = run(
            "object.s.matches(object.re)",
            &json!({"s": "x", "re": "a?".repeat(50_000)}),
            1_000_000,
        );
        assert!(
            matches!(&result, Err(Failure::Error(m)) if m.contains("a regex of 100000 bytes is more than 4096")),
            "{result:?}"
        );
        // A compile is charged per byte of its pattern: patterns from the
        // request, each new, reach the budget after a few compiles, not
        // after thousands.
        let patterns: Vec<String> = (0..100)
            .map(|i| format!("{}{i}", "a?".repeat(2_000)))
            .collect();
        let (result, budget) = run(
            "object.res.all(re, !'b'.matches(re))",
            &json!({"res": patterns}),
            1_000_000,
        );
        assert_eq!(
            result,
            Err(Failure::OverBudget),
            "{result:?} {}",
            budget.steps()
        );
        // The text read is charged, in proportion to the size the regex
        // compiled within: 64 KB with the smallest is 128,000 steps, and
        // with one of the largest (Unicode word classes) 64 times that.
        let (result, budget) = run(
            "object.s.matches('z')",
            &json!({"s": "y".repeat(64_000)}),
            1_000_000,
        );
        assert_eq!(result, Ok(::cel::Value::Bool(false)));
        assert!(budget.steps() >= 128_000, "{}", budget.steps());
        let (result, _) = run(
            "object.s.matches('\\\\w+@\\\\w+')",
            &json!({"s": "y".repeat(64_000)}),
            1_000_000,
        );
        assert_eq!(result, Err(Failure::OverBudget));
        // A thousand calls with the same pattern: it is compiled once, so
        // they cost about what a loop without it does, where a compile
        // each would add 1,000,000 steps.
        let names: Vec<String> = (0..1_000).map(|i| format!("c{i}")).collect();
        let steps = |source: &str| {
            let (result, budget) = run(source, &json!({"names": names}), 100_000_000);
            assert_eq!(result, Ok(::cel::Value::Bool(true)), "{source}");
            budget.steps()
        };
        let matching = steps("object.names.all(n, n.matches('^c[0-9]+$'))");
        let sizing = steps("object.names.all(n, n.size() > 0)");
        assert!(
            matching < sizing + 100 * MATCHES_COMPILE_STEPS,
            "{matching} against {sizing}"
        );
    }

    /// Gives `expression` its literal patterns compiled, as the rule
    /// compiler does.
    #[test]
    fn a_run_time_pattern_folding_the_case_of_a_large_class_is_refused() {
        // Each copy of `\P{Any}` took 52 ms to compile (debug build), the
        // whole class case-folded, for eight bytes of pattern.
        let hostile = format!("(?i){}", vec!["\\P{Any}"; 500].join("|"));
        for pattern in [hostile.as_str(), "(?i)^[\\w.-]+$", "(?i)[é-ÿ]"] {
            let object = json!({"s": "abc", "p": pattern});
            let (result, budget) = run("object.s.matches(object.p)", &object, 10_000_000);
            let Err(Failure::Error(message)) = result else {
                panic!("{pattern}: {result:?}");
            };
            assert!(
                message.contains("folds the case of a large class"),
                "{message}"
            );
            assert!(budget.steps() > MATCHES_COMPILE_STEPS, "charged");
        }
        // Case-insensitive with small classes, or Unicode classes matched
        // case-sensitively, compile as before.
        for (pattern, expected) in [("(?i)^[A-Z0-9_.-]+$", true), ("^\\pL+$", true)] {
            let object = json!({"s": "abc", "p": pattern});
            let (result, _) = run("object.s.matches(object.p)", &object, 10_000_000);
            assert_eq!(result, Ok(::cel::Value::Bool(expected)), "{pattern}");
        }
    }

    fn give_literal_patterns(expression: &mut Expression) {
        let compiled = expression
            .literal_patterns()
            .iter()
            .map(|pattern| {
                let regex = crate::plan::tiered_pattern(pattern, MAX_MATCHES_REGEX_BYTES, |_| true)
                    .expect("a pattern");
                (pattern.clone(), regex)
            })
            .collect();
        expression.use_literal_patterns(compiled);
    }

    #[test]
    fn literal_patterns_compiled_with_the_rules_are_not_compiled_again() {
        // Twenty distinct literal patterns, more than a thread keeps of the
        // patterns it compiles itself: each call compiled again.
        let calls: Vec<String> = (0..20).map(|i| format!("n.matches('^c{i}x')")).collect();
        let source = format!("object.names.all(n, [{}].size() == 20)", calls.join(", "));
        let names: Vec<String> = (0..200).map(|i| format!("c{i}")).collect();
        let object = json!({ "names": names });
        let steps = |expression: &Expression| {
            let budget = Budget::new(Limits::DEFAULT);
            let result = expression.evaluate(
                |variable| (variable == Variable::Object).then_some(&object),
                &budget,
            );
            assert_eq!(result, Ok(::cel::Value::Bool(true)));
            budget.steps()
        };
        let mut expression = Expression::compile(&source, &[]).expect("compiles");
        assert_eq!(expression.literal_patterns().len(), 20);
        let compiling = steps(&expression);
        give_literal_patterns(&mut expression);
        let given = steps(&expression);
        // 4,000 calls: compiling each costs over 1,000 steps more.
        assert!(
            given + 4_000 * MATCHES_COMPILE_STEPS <= compiling,
            "given {given}, compiling {compiling}"
        );
    }

    #[test]
    fn a_literal_pattern_given_compiled_matches_as_one_compiled_at_run_time() {
        let object = json!({"names": ["web-1", "Web-2", "db", "", "ünïcode-9", "a\nb"]});
        for pattern in [
            "^web-[0-9]+$",
            "(?i)^web",
            "^$",
            "\\\\p{L}+-\\\\d",
            "a.b",
            "(?s)a.b",
            "\\\\w+@\\\\w+",
        ] {
            let source = format!("object.names.map(n, n.matches('{pattern}'))");
            let evaluate = |expression: &Expression| {
                let budget = Budget::new(Limits::DEFAULT);
                expression.evaluate(
                    |variable| (variable == Variable::Object).then_some(&object),
                    &budget,
                )
            };
            let mut expression = Expression::compile(&source, &[]).expect("compiles");
            let at_run_time = evaluate(&expression);
            assert!(at_run_time.is_ok(), "{source}: {at_run_time:?}");
            give_literal_patterns(&mut expression);
            let given = evaluate(&expression);
            assert_eq!(given, at_run_time, "{source}");
            if pattern == "(?i)^web" {
                let given = given.ok().and_then(|value| value.json().ok());
                assert_eq!(
                    given,
                    Some(json!([true, true, false, false, false, false])),
                    "{source}"
                );
            }
        }
    }

    #[test]
    fn a_loop_over_literals_is_charged_too() {
        let list = format!("[{}]", vec!["0"; 300].join(","));
        let source = format!("{list}.all(a, {list}.all(b, {list}.all(c, a + b + c >= 0)))");
        let (result, _) = run(&source, &Value::Null, 10_000_000);
        assert_eq!(result, Err(Failure::OverBudget));
    }

    #[test]
    fn errors_and_wrong_types_are_failures_not_panics() {
        let object = json!({"spec": {}});
        let (result, _) = run("object.spec.missing == 1", &object, 1000);
        assert!(
            matches!(result, Err(Failure::Error(ref m)) if m.contains("missing")),
            "{result:?}"
        );
        let expression = Expression::compile("'text'", &[]).unwrap();
        let budget = Budget::new(Limits::DEFAULT);
        let holds = expression.holds(|_| None, &budget);
        assert!(
            matches!(holds, Err(Failure::Error(ref m)) if m.contains("not a bool")),
            "{holds:?}"
        );
        // A call with the wrong types names the function the rule wrote,
        // not the one kadmit runs in its place.
        for (source, written) in [
            ("1.format([])", "'format'"),
            ("'a'.replace(1, 'b')", "'replace'"),
            ("'a'.split(1)", "'split'"),
            ("'a'.indexOf(1)", "'indexOf'"),
            ("'a'.lastIndexOf(1)", "'lastIndexOf'"),
            ("strings.quote(1)", "'strings.quote'"),
            ("'a'.matches(1)", "'matches'"),
        ] {
            let (result, _) = run(source, &object, 1000);
            assert!(
                matches!(&result, Err(Failure::Error(m)) if m.contains(written) && !m.contains('@')),
                "{source}: {result:?}"
            );
        }
    }

    fn patch_of(source: &str, object: &Value) -> Result<Value, Failure> {
        let expression = Expression::compile_patch(source, Bounds::RULE_FILES)
            .unwrap_or_else(|e| panic!("{source}: {e}"));
        let budget = Budget::new(Limits::DEFAULT);
        expression.patch_operations(
            |variable| (variable == Variable::Object).then_some(object),
            &budget,
        )
    }

    #[test]
    fn patch_expressions_build_json_patch_operations() {
        let object = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        let patch = patch_of(
            "lists.range(size(object.spec.containers)).map(i, JSONPatch{op: 'add', \
             path: '/spec/containers/' + string(i) + '/x', value: {'k': [i]}}) + \
             [JSONPatch{op: 'add', path: '/metadata/' + jsonpatch.escapeKey('a/b~c'), value: 1}]",
            &object,
        );
        assert_eq!(
            patch,
            Ok(json!([
                {"op": "add", "path": "/spec/containers/0/x", "value": {"k": [0]}},
                {"op": "add", "path": "/spec/containers/1/x", "value": {"k": [1]}},
                {"op": "add", "path": "/metadata/a~1b~0c", "value": 1},
            ]))
        );
        // Lists of lists flatten, as the generated expressions need.
        assert_eq!(
            patch_of("[[1], [2, 3]].flatten()", &object),
            Ok(json!([1, 2, 3]))
        );
    }

    #[test]
    fn a_json_patch_value_is_checked_as_it_is_built() {
        let object = json!({});
        for (source, expected) in [
            (
                "[JSONPatch{op: 'frobnicate', path: '/a'}]",
                "op \"frobnicate\" is not a JSON Patch operation",
            ),
            (
                "[JSONPatch{op: 1, path: '/a'}]",
                "op must be a string, not a int",
            ),
            (
                "[JSONPatch{op: 'add', path: '/' + jsonpatch.escapeKey(1)}]",
                "no matching overload for 'jsonpatch.escapeKey' applied to '(int)'",
            ),
            ("[JSONPatch{op: 'add', path: 1}]", "path must be a string"),
            (
                "[JSONPatch{op: 'add', path: '/a', colour: 1}]",
                "no field colour",
            ),
            ("[JSONPatch{op: 'add'}]", "op and path are required"),
            ("JSONPatch{op: 'add', path: '/a'}", "not a list"),
        ] {
            match patch_of(source, &object) {
                Err(Failure::Error(message)) => {
                    assert!(message.contains(expected), "{source}: {message}");
                }
                other => panic!("{source}: {other:?}"),
            }
        }
        // Rule files have no such type.
        let budget = Budget::new(Limits::DEFAULT);
        let in_rule_file = Expression::compile("JSONPatch{op: 'add', path: '/a'} != null", &[])
            .expect("compiles")
            .holds(|_| None, &budget);
        assert!(
            matches!(in_rule_file, Err(Failure::Error(_))),
            "{in_rule_file:?}"
        );
    }
}

#[cfg(test)]
mod hostile_sources {
    use super::*;

    /// Compiles on a thread with the stack of a test or a worker thread.
    fn compiles_without_crashing(source: String) -> Result<(), CompileError> {
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || Expression::compile(&source, &[]).map(|_| ()))
            .expect("thread")
            .join()
            .expect("compiling panicked")
    }

    #[test]
    fn nesting_at_the_bounds_compiles_and_beyond_them_is_an_error() {
        let n = MAX_SOURCE_NESTING;
        let parens = |n: usize| format!("{}1{}", "(".repeat(n), ")".repeat(n));
        assert_eq!(compiles_without_crashing(parens(n)), Ok(()));
        let error = compiles_without_crashing(parens(n + 1)).unwrap_err();
        assert!(error.message.contains("nest 33 deep"), "{error:?}");
        let half = MAX_SOURCE_BYTES / 2 - 1;
        let error = compiles_without_crashing(parens(half)).unwrap_err();
        assert!(error.message.contains("over the limit of 32"), "{error:?}");
        let ternaries = format!("{}0", "true ? 1 : ".repeat(n + 1));
        assert!(compiles_without_crashing(ternaries).is_err());
        // Brackets in a string literal do not count.
        let literal = format!("'{}' == ''", "(".repeat(100));
        assert_eq!(compiles_without_crashing(literal), Ok(()));
    }

    #[test]
    fn long_chains_within_the_size_bound_are_errors_not_crashes() {
        for source in [
            format!("{}true", "!".repeat(MAX_SOURCE_BYTES - 4)),
            format!("{}1", "-".repeat(MAX_SOURCE_BYTES - 1)),
            format!("object{}", ".a".repeat(MAX_SOURCE_BYTES / 2 - 4)),
            format!("{}1", "1 + ".repeat(MAX_SOURCE_BYTES / 4 - 1)),
        ] {
            assert!(source.len() <= MAX_SOURCE_BYTES, "{}", source.len());
            let shown: String = source.chars().take(12).collect();
            // An error, or an expression small enough to run: the parser
            // folds `!!` and `--` away.
            let result = std::thread::Builder::new()
                .stack_size(2 << 20)
                .spawn(move || {
                    Expression::compile(&source, &[]).map(|expression| {
                        let budget = Budget::new(crate::eval::budget::Limits::DEFAULT);
                        let _ = expression.evaluate(|_| None, &budget);
                        expression.nodes
                    })
                })
                .expect("thread")
                .join()
                .expect("compiling or evaluating panicked");
            if let Ok(nodes) = result {
                assert!(nodes <= MAX_NODES, "{shown}…: {nodes} nodes");
            }
        }
    }

    #[test]
    fn the_deepest_expression_allowed_evaluates_on_a_small_stack() {
        // A chain of `&&` almost as deep as allowed, its innermost term a
        // comprehension.
        let source = "[1].all(x, x == 1) == true".to_owned() + &" && true".repeat(MAX_DEPTH - 4);
        let result = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                let expression = Expression::compile(&source, &[]).expect("compiles");
                let budget = Budget::new(crate::eval::budget::Limits::DEFAULT);
                expression.holds(|_| None, &budget)
            })
            .expect("thread")
            .join()
            .expect("evaluating panicked");
        assert_eq!(result, Ok(true));
    }
}
