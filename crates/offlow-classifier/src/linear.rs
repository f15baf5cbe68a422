//! The oracle: a linear scan over every rule. Obviously correct, slow.

use offlow_sync::IdMap;

use crate::{Classify, FlowKey, Rule, RuleId};

/// A classifier that checks every rule on every lookup.
#[derive(Debug, Default, Clone)]
pub struct LinearClassifier {
    rules: Vec<Rule>,
    index: IdMap<RuleId, usize>,
}

impl LinearClassifier {
    /// An empty classifier.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every rule, in no particular order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The rule with `id`, if present, by reference.
    pub fn rule(&self, id: RuleId) -> Option<&Rule> {
        self.index.get(&id).map(|&i| &self.rules[i])
    }
}

impl Classify for LinearClassifier {
    fn insert(&mut self, rule: Rule) {
        match self.index.get(&rule.id) {
            Some(&i) => self.rules[i] = rule,
            None => {
                self.index.insert(rule.id, self.rules.len());
                self.rules.push(rule);
            }
        }
    }

    fn remove(&mut self, id: RuleId) -> Option<Rule> {
        let i = self.index.remove(&id)?;
        let rule = self.rules.swap_remove(i);
        if let Some(moved) = self.rules.get(i) {
            self.index.insert(moved.id, i);
        }
        Some(rule)
    }

    fn lookup(&self, key: &FlowKey) -> Option<RuleId> {
        let mut best: Option<&Rule> = None;
        for r in &self.rules {
            if r.matches(key) && best.is_none_or(|b| r.beats(b)) {
                best = Some(r);
            }
        }
        best.map(|r| r.id)
    }

    fn len(&self) -> usize {
        self.rules.len()
    }

    fn get(&self, id: RuleId) -> Option<Rule> {
        self.rule(id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Field, Match, PortRange};
    use offlow_flow::present;

    fn key(dst: u32, dport: u16) -> FlowKey {
        let mut k = FlowKey::ZERO;
        k.set(Field::EthType, 0x0800);
        k.set(Field::Ipv4Dst, dst as u128);
        k.set(Field::IpProto, 6);
        k.set(Field::TcpDst, dport as u128);
        k.add_presence(present::L3 | present::L4);
        k
    }

    #[test]
    fn priority_then_smaller_id() {
        let mut c = LinearClassifier::new();
        let mut m = Match::ANY;
        m.set_prefix(Field::Ipv4Dst, 0x0a00_0000, 8);
        c.insert(Rule::new(5, 10, m));
        c.insert(Rule::new(3, 10, m));
        c.insert(Rule::new(9, 1, Match::ANY));
        assert_eq!(c.lookup(&key(0x0a01_0203, 80)), Some(3));
        assert_eq!(c.lookup(&key(0x0b01_0203, 80)), Some(9));
        c.remove(3);
        assert_eq!(c.lookup(&key(0x0a01_0203, 80)), Some(5));
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn port_ranges_require_transport() {
        let mut c = LinearClassifier::new();
        c.insert(
            Rule::new(1, 1, Match::ANY).with_ports(PortRange::ANY, PortRange { lo: 0, hi: 1023 }),
        );
        assert_eq!(c.lookup(&key(1, 80)), Some(1));
        assert_eq!(c.lookup(&key(1, 8080)), None);
        assert_eq!(
            c.lookup(&FlowKey::ZERO),
            None,
            "no transport header: no match"
        );
    }
}
