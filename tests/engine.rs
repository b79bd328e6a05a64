//! The engine on a whole request, as most tests call it: select, then
//! evaluate (the server selects while it decodes; see `server::decide`).

use kadmit::eval::{self, Ask, EvalError, Verdict};
use kadmit::plan::{Mode, Plan, RuleSetId};
use kadmit::review::Request;

/// The verdict of the rules of `mode` (of `rule_set`, when given) on `request`.
pub fn evaluate(
    plan: &Plan,
    request: &Request,
    mode: Mode,
    rule_set: Option<RuleSetId>,
) -> Result<Verdict, EvalError> {
    eval::select(plan, request, Ask::new(mode).rule_sets(rule_set)).evaluate(request)
}
