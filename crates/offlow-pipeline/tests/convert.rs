//! The wire ↔ pipeline seam (`offlow_pipeline::convert`) on arbitrary wire
//! actions and instructions.

use offlow_flow::Field;
use offlow_openflow::{
    Action, BadActionCode, FlowMod, FlowModFailedCode, Instruction, OfError, OFLW_EXPERIMENTER,
};
use offlow_pipeline::ToPipeline;
use proptest::collection::vec;
use proptest::prelude::*;

fn aligned_bytes() -> BoxedStrategy<Vec<u8>> {
    (0usize..3)
        .prop_flat_map(|n| vec(any::<u8>(), n * 8))
        .boxed()
}

fn arb_action() -> BoxedStrategy<Action> {
    let set_field = (0u8..40).prop_flat_map(|n| {
        let f = Field::from_oxm(n).expect("0..40 are basic fields");
        any::<u128>().prop_map(move |v| Action::SetField(f, v & f.full_mask()))
    });
    prop_oneof![
        (any::<u32>(), any::<u16>()).prop_map(|(port, max_len)| Action::Output { port, max_len }),
        Just(Action::CopyTtlOut),
        Just(Action::CopyTtlIn),
        any::<u8>().prop_map(Action::SetMplsTtl),
        Just(Action::DecMplsTtl),
        any::<u16>().prop_map(Action::PushVlan),
        Just(Action::PopVlan),
        any::<u16>().prop_map(Action::PushMpls),
        any::<u16>().prop_map(Action::PopMpls),
        any::<u32>().prop_map(Action::SetQueue),
        any::<u32>().prop_map(Action::Group),
        any::<u8>().prop_map(Action::SetNwTtl),
        Just(Action::DecNwTtl),
        set_field,
        any::<u16>().prop_map(Action::PushPbb),
        Just(Action::PopPbb),
        any::<u64>().prop_map(Action::SetWorkers),
        (
            any::<u32>().prop_filter("not OFLW", |e| *e != OFLW_EXPERIMENTER),
            aligned_bytes()
        )
            .prop_map(|(experimenter, data)| Action::Experimenter { experimenter, data }),
    ]
    .boxed()
}

fn arb_instruction() -> BoxedStrategy<Instruction> {
    let actions = || vec(arb_action(), 0..4);
    prop_oneof![
        any::<u8>().prop_map(Instruction::GotoTable),
        (any::<u64>(), any::<u64>())
            .prop_map(|(value, mask)| Instruction::WriteMetadata { value, mask }),
        actions().prop_map(Instruction::WriteActions),
        actions().prop_map(Instruction::ApplyActions),
        Just(Instruction::ClearActions),
        any::<u32>().prop_map(Instruction::Meter),
        (any::<u32>(), aligned_bytes())
            .prop_map(|(experimenter, data)| Instruction::Experimenter { experimenter, data }),
    ]
    .boxed()
}

proptest! {
    /// Actions and instructions survive codec → pipeline → codec (except
    /// what the pipeline does not model: PBB, experimenter data).
    #[test]
    fn pipeline_conversion(ins in vec(arb_instruction(), 0..4)) {
        for i in &ins {
            match i.to_pipeline() {
                Ok(p) => {
                    let back = Instruction::from(&p);
                    let lossless = !format!("{i:?}").contains("Experimenter");
                    if lossless {
                        prop_assert_eq!(&back, i);
                    }
                }
                Err(e) => prop_assert_eq!(e, OfError::BadAction(BadActionCode::BadType)),
            }
        }
    }
}

#[test]
fn flow_mod_bad_command() {
    let mut fm = FlowMod::add(0, 1, &offlow_flow::Match::ANY, vec![]);
    fm.command = 9;
    assert_eq!(
        fm.to_pipeline().map(|_| ()),
        Err(OfError::FlowModFailed(FlowModFailedCode::BadCommand))
    );
}
