"""The InfiniBand size catalog and its validation (docs/facts.md sections 1, 2, 5, 6)."""

from __future__ import annotations

import datetime

import pytest

from dtrun.azure.catalog import (
    SIZES,
    CatalogError,
    Image,
    check_node_count,
    get_size,
    known_sizes,
    retirement_warning,
    without_rdma,
)
from dtrun.azure.sizefacts import health_threshold, peak_tflops_for

TODAY = datetime.date(2026, 11, 23)


def test_every_size_of_the_facts_table_is_in_the_catalog():
    assert set(SIZES) == {
        "Standard_NC24rs_v3", "Standard_ND40rs_v2", "Standard_ND96asr_v4",
        "Standard_ND96amsr_A100_v4", "Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5",
        "Standard_ND96isr_MI300X_v5", "Standard_HB120rs_v2", "Standard_HB120rs_v3",
        "Standard_HB176rs_v4", "Standard_HC44rs", "Standard_HX176rs", "Standard_NC24r",
    }  # fmt: skip


def test_gpu_sizes_carry_gpus_peaks_ib_and_images():
    h100 = get_size("Standard_ND96isr_H100_v5", today=TODAY)
    assert (h100.gpu_count, h100.gpu and h100.gpu.peak_bf16_tflops) == (8, 989.0)
    assert (h100.ib_name, h100.ib_gbps, h100.ib_ports, h100.ib_total_gbps) == ("NDR", 400, 8, 3200)
    assert h100.image.urn == "microsoft-dsvm:ubuntu-hpc:2204:latest"
    assert h100.topo_file == "/opt/microsoft/ndv5/topo.xml"
    assert h100.busbw_single_node_gbs == 479.0
    assert get_size("Standard_ND40rs_v2", today=TODAY).image.sku == "2204-v100"
    assert get_size("Standard_ND96isr_MI300X_v5", today=TODAY).image.sku == "2204-rocm"
    assert get_size("Standard_ND96asr_v4", today=TODAY).gpu.peak_bf16_tflops == 312.0  # type: ignore[union-attr]


def test_every_nccl_setting_says_why():
    for size in SIZES.values():
        for var in size.env:
            assert var.why, f"{size.name}: {var.key} has no reason"


def test_ndv4_and_ndv5_export_the_image_nccl_conf():
    for name, topo in (
        ("Standard_ND96asr_v4", "/opt/microsoft/ndv4/topo.xml"),
        ("Standard_ND96isr_H100_v5", "/opt/microsoft/ndv5/topo.xml"),
    ):
        env = {var.key: var.value for var in SIZES[name].env}
        assert env["NCCL_IB_PCI_RELAXED_ORDERING"] == "1"
        assert env["NCCL_TOPO_FILE"] == topo
        assert env["NCCL_IGNORE_CPU_AFFINITY"] == "1"


def test_accelerated_networking_follows_the_facts_table():
    assert not SIZES["Standard_NC24rs_v3"].accelerated_networking
    assert SIZES["Standard_ND96isr_H100_v5"].accelerated_networking


def test_names_are_found_without_prefix_or_case():
    assert get_size("nd96isr_h100_v5", today=TODAY).name == "Standard_ND96isr_H100_v5"


def test_a_size_without_infiniband_suggests_its_r_variant():
    with pytest.raises(CatalogError) as caught:
        get_size("Standard_ND96is_H100_v5", today=TODAY)
    assert "has no InfiniBand" in caught.value.message
    assert "use Standard_ND96isr_H100_v5" in caught.value.message
    assert caught.value.exit_code == 2


def test_a_non_r_size_whose_r_variant_retired_names_the_successors():
    with pytest.raises(CatalogError) as caught:
        get_size("Standard_NC24s_v3", today=TODAY)
    assert "Standard_NC24rs_v3 was retired on 2025-09-30" in caught.value.message
    assert "Standard_ND96isr_H100_v5" in caught.value.message


def test_a_retired_size_is_refused_with_its_successors():
    with pytest.raises(CatalogError, match="retired on 2025-09-30") as caught:
        get_size("Standard_NC24rs_v3", today=TODAY)
    assert "Standard_ND96asr_v4" in caught.value.message
    with pytest.raises(CatalogError, match="retired on 2023-09-06"):
        get_size("Standard_NC24r", today=TODAY)


def test_a_size_is_usable_until_its_retirement_date():
    assert get_size("Standard_NC24rs_v3", today=datetime.date(2025, 9, 29)).name
    assert get_size("Standard_HC44rs", today=TODAY).name == "Standard_HC44rs"


def test_announced_retirements_warn_with_the_successor():
    warning = retirement_warning(SIZES["Standard_HB120rs_v2"], TODAY)
    assert warning == (
        "Standard_HB120rs_v2 retires on 2027-05-31; plan a move to Standard_HB120rs_v3"
    )
    assert retirement_warning(SIZES["Standard_HB120rs_v3"], TODAY) is None


def test_unknown_sizes_get_a_did_you_mean():
    with pytest.raises(CatalogError, match="did you mean Standard_ND96isr_H100_v5"):
        get_size("Standard_ND96isr_H100_v6", today=TODAY)


def test_known_sizes_leave_out_retired_ones():
    assert "Standard_NC24rs_v3" not in known_sizes(TODAY)
    assert "Standard_ND96isr_H200_v5" in known_sizes(TODAY)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Standard_ND96isr_H100_v5", "Standard_ND96is_H100_v5"),
        ("Standard_ND96amsr_A100_v4", "Standard_ND96ams_A100_v4"),
        ("Standard_HC44rs", "Standard_HC44s"),
        ("Standard_NC24r", "Standard_NC24"),
    ],
)
def test_without_rdma_drops_the_r(name, expected):
    assert without_rdma(name) == expected


@pytest.mark.parametrize("nodes", [0, -1, 101, 300])
def test_node_counts_outside_one_scale_set_are_refused(nodes):
    with pytest.raises(CatalogError) as caught:
        check_node_count(nodes)
    assert "300 after a support request" in caught.value.message


def test_node_counts_inside_one_scale_set_pass():
    assert check_node_count(1) == 1
    assert check_node_count(100) == 100


def test_image_urns_parse_and_bad_ones_are_refused():
    assert Image.parse("almalinux:almalinux-hpc:8_10-hpc-gen2:latest").offer == "almalinux-hpc"
    with pytest.raises(CatalogError, match="is not an image URN"):
        Image.parse("ubuntu-hpc:2204")


def test_peak_for_mfu_only_when_verified():
    assert peak_tflops_for("Standard_ND96isr_H100_v5") == 989.0
    assert peak_tflops_for("Standard_NC24rs_v3") is None  # V100 PCIe peak is unverified
    assert peak_tflops_for("Standard_HB120rs_v3") is None
    assert peak_tflops_for(None) is None


# Azure/azurehpc-health-checks conf/<size>.conf, check_nccl_allreduce (docs/facts.md section 6).
AZURE_HEALTH_CHECKS = {
    "Standard_ND96asr_v4": (228.0, "8G"),
    "Standard_ND96amsr_A100_v4": (228.0, "16G"),
    "Standard_ND96isr_H100_v5": (460.0, "16G"),
    "Standard_ND96isr_H200_v5": (431.0, "16G"),
}


@pytest.mark.parametrize(("name", "mark"), AZURE_HEALTH_CHECKS.items())
def test_the_health_pass_mark_is_azures_at_azures_message_size(name, mark):
    assert health_threshold(name) == mark


@pytest.mark.parametrize("size", [s for s in SIZES.values() if s.busbw_cross_node_gbs])
def test_expected_cross_node_busbw_never_passes_the_nodes_infiniband_line_rate(size):
    """A ring all-reduce across nodes moves its busbw through each node's NICs: Gb/s / 8."""
    low, high = size.busbw_cross_node_gbs
    assert low <= high <= size.ib_total_gbps / 8


@pytest.mark.parametrize("name", ["", " ", "Standard_ND96 isr"])
def test_a_size_dtrun_does_not_know_is_quoted_so_an_empty_or_spaced_name_shows(name):
    # `dtrun predict --size ''` printed "error:  is not an InfiniBand size dtrun knows"
    with pytest.raises(CatalogError) as caught:
        get_size(name, setting="--size")
    assert str(caught.value.what).startswith(f"{name!r} is not an InfiniBand size dtrun knows")
    assert caught.value.exit_code == 2
