use super::*;

/// torchvision's parameter counts (`sum(p.numel() for p in resnetN().parameters())`).
#[test]
fn parameter_counts_equal_torchvisions() {
    for (depth, count) in [(18, 11_689_512), (34, 21_797_672), (50, 25_557_032)] {
        let m = ResNet::new(
            ResNetConfig::depth(depth, 1000).unwrap(),
            &mut Generator::new(0),
        )
        .unwrap();
        assert_eq!(m.num_parameters(), count, "resnet{depth}");
    }
}

#[test]
fn names_are_torchvisions() {
    let m = ResNet::new(ResNetConfig::depth(50, 10).unwrap(), &mut Generator::new(0)).unwrap();
    let names: Vec<String> = m.state_dict().into_keys().collect();
    for want in [
        "conv1.weight",
        "bn1.running_var",
        "bn1.num_batches_tracked",
        "layer1.0.conv3.weight",
        "layer1.0.downsample.0.weight",
        "layer2.0.downsample.1.bias",
        "layer4.2.bn3.weight",
        "fc.weight",
        "fc.bias",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
    }
    // A basic block keeps its width, so only stages 2-4 open with a downsample.
    let m = ResNet::new(ResNetConfig::depth(18, 10).unwrap(), &mut Generator::new(0)).unwrap();
    let names: Vec<String> = m.state_dict().into_keys().collect();
    assert!(!names.iter().any(|n| n.starts_with("layer1.0.downsample")));
    assert!(names.iter().any(|n| n == "layer2.0.downsample.0.weight"));
    assert_eq!(names.len(), 122, "resnet18's state dict has 122 entries");
}

#[test]
fn logits_have_one_row_per_image_and_input_shape_is_checked() {
    let mut m = ResNet::new(ResNetConfig::depth(18, 7).unwrap(), &mut Generator::new(1)).unwrap();
    m.eval();
    let x = Tensor::rand(
        &[2, 3, 64, 48],
        crate::DType::F32,
        Some(&mut Generator::new(2)),
    )
    .unwrap();
    assert_eq!(m.forward(&x).unwrap().shape(), [2, 7]);
    let err = m.forward(&x.narrow(1, 0, 1).unwrap()).unwrap_err();
    assert!(err.to_string().contains("[N, 3, H, W]"), "{err}");
    assert!(ResNetConfig::depth(20, 10).is_err());
}
