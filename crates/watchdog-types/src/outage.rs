//! A remote service asked again and again (the SLURM controller, a cloud's metadata
//! server): that it stopped answering is said once, with the reason, until it answers
//! again, which is said once too. Pure bookkeeping, shared by the pollers that ask.

/// What an [`Outage`] has to say since it was last asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Said {
    /// It stopped answering, for this reason.
    Unanswered(String),
    /// It answers again.
    Answered,
}

/// Whether a service answers, and what of it was said.
#[derive(Clone, Debug, Default)]
pub struct Outage {
    /// The reason of a failure not yet said.
    error: Option<String>,
    failing: bool,
    said_failing: bool,
}

impl Outage {
    /// The last question failed, for `reason`.
    pub fn failed(&mut self, reason: String) {
        self.failing = true;
        self.error = Some(reason);
    }

    /// The last question was answered.
    pub fn answered(&mut self) {
        self.failing = false;
        self.error = None;
    }

    /// What changed since the last call, oldest first: a failure once until it answers
    /// again, then that it answers.
    pub fn news(&mut self) -> Vec<Said> {
        let mut out = Vec::new();
        if let Some(e) = self.error.take()
            && !self.said_failing
        {
            self.said_failing = true;
            out.push(Said::Unanswered(e));
        }
        if !self.failing && self.said_failing {
            self.said_failing = false;
            out.push(Said::Answered);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_said_once_until_it_answers_again() {
        let mut o = Outage::default();
        assert!(o.news().is_empty());
        o.failed("refused".into());
        assert_eq!(o.news(), [Said::Unanswered("refused".into())]);
        o.failed("refused again".into());
        assert!(o.news().is_empty(), "said once");
        o.answered();
        assert_eq!(o.news(), [Said::Answered]);
        assert!(o.news().is_empty());
        // Failing and answering between two looks: both said.
        o.failed("timeout".into());
        o.answered();
        assert!(
            o.news().is_empty(),
            "nothing said of a failure already over"
        );
    }
}
