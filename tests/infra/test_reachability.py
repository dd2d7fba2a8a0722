"""Every flow dtrun's launchers and engines need, and nothing else from outside, with the NSGs
evaluated as Azure evaluates them (tests/infra/reachability.py)."""

from __future__ import annotations

import ipaddress
from functools import cache
from typing import Any

import pytest

from dtrun.infra.slurm import SLURMCTLD_PORT, SLURMD_PORT
from dtrun.spec.cluster import ClusterSpec, Scheduler, StorageKind
from tests.infra.harness import Program
from tests.infra.reachability import (
    NAT,
    OWN_PUBLIC_IP,
    Address,
    Flow,
    Graph,
    Subnet,
    egress,
    graph,
    parse_rules,
)
from tests.infra.test_program import ADMIN, cluster, program

OTHER_ADMIN = "198.51.100.0/24"
STRANGER = Address("192.0.2.77")  # an internet address in no admin CIDR
AZURE_FILES_ENDPOINT = Address("20.60.0.10")  # the account's public address (service endpoint)
EPHEMERAL = (32768, 60999)  # Linux's ip_local_port_range: where srun, NCCL and gloo listen
NODES = 3  # node addresses tried: .4, .5, .6

CLUSTERS: dict[str, dict[str, Any]] = {
    "azure-files": {},
    "netapp": {"storageKind": "netapp", "storageSizeGib": 4096},
    "lustre": {"storageKind": "lustre", "storageSizeGib": 8192, "zone": "1"},
    "slurm": {"scheduler": "slurm", "nodeCount": 4},
    "slurm-netapp": {"scheduler": "slurm", "storageKind": "netapp", "storageSizeGib": 4096},
    "two-admin-cidrs": {"adminCidrs": [ADMIN, OTHER_ADMIN]},
}


@cache
def built(name: str) -> tuple[ClusterSpec, Program, Graph]:
    spec = cluster(**CLUSTERS[name])
    p = program(spec)
    return spec, p, graph(p)


def head(g: Graph) -> Address:
    return g.address("head", 4)


def nodes(g: Graph) -> list[Address]:
    return [g.address("nodes", 4 + index) for index in range(NODES)]


def refused(g: Graph, source: Address, destination: Address, protocol: str, ports) -> list[str]:
    """The flows among these ports that the NSGs refuse, each with the rule that refused it."""
    return [
        f"{source} -> {destination} {protocol}/{port}: "
        + ", ".join(f"{r.name} ({r.priority})" for r in g.deciding(flow) if r.access != "Allow")
        for port in ports
        if not g.allows(flow := Flow(source, destination, protocol, port))
    ]


def within(g: Graph, low: int, high: int) -> list[int]:
    return [port for port in g.boundary_ports() if low <= port <= high] or [low]


@pytest.mark.parametrize("name", CLUSTERS)
def test_the_admin_cidrs_reach_the_head_on_ssh(name):
    spec, _, g = built(name)
    for cidr in spec.admin_cidrs:
        for address in (ipaddress.ip_network(cidr)[0], ipaddress.ip_network(cidr)[-1]):
            assert not refused(g, Address(address), head(g), "Tcp", [22])


@pytest.mark.parametrize("name", CLUSTERS)
def test_the_head_reaches_every_node_on_ssh(name):
    _, _, g = built(name)
    for node in nodes(g):
        assert not refused(g, head(g), node, "Tcp", [22])


@pytest.mark.parametrize("name", CLUSTERS)
def test_every_node_reaches_every_other_node_on_every_tcp_port(name):
    """SSH from node 0 (mpirun, pdsh, horovodrun), the rendezvous and MASTER_PORT (--port takes
    any port), and the ephemeral ports NCCL's bootstrap, gloo and MPI listen on."""
    _, _, g = built(name)
    failures = [
        failure
        for source in nodes(g)
        for destination in nodes(g)
        if source != destination
        for failure in refused(g, source, destination, "Tcp", within(g, 1, 65535))
    ]
    assert not failures, failures


@pytest.mark.parametrize("name", [n for n in CLUSTERS if "slurm" in n])
def test_slurm_daemons_and_srun_reach_each_other(name):
    """slurmd -> slurmctld, slurmctld -> slurmd, slurmd -> slurmd (its message fan-out), and the
    nodes' slurmstepd -> srun on the head, which listens on an ephemeral port."""
    spec, _, g = built(name)
    assert spec.scheduler is Scheduler.SLURM
    the_head, the_nodes = head(g), nodes(g)
    srun = within(g, *EPHEMERAL)
    failures = [
        *(f for node in the_nodes for f in refused(g, node, the_head, "Tcp", [SLURMCTLD_PORT])),
        *(f for node in the_nodes for f in refused(g, the_head, node, "Tcp", [SLURMD_PORT])),
        *(f for node in the_nodes[1:] for f in refused(g, the_nodes[0], node, "Tcp",
                                                       [SLURMD_PORT])),
        *(f for node in the_nodes for f in refused(g, node, the_head, "Tcp", srun)),
    ]  # fmt: skip
    assert not failures, failures


def storage_endpoint(spec: ClusterSpec, p: Program) -> tuple[Address, int]:
    kind = spec.storage.kind
    if kind is StorageKind.NETAPP:
        target = p.one(":CapacityPoolVolume")
        rule = target.inputs["exportPolicy"]["rules"][0]
        clients = ipaddress.ip_network(rule["allowedClients"])
        for subnet in p.of_type(":Subnet"):
            if subnet.name in ("net-head", "net-nodes"):
                assert ipaddress.ip_network(subnet.inputs["addressPrefix"]).subnet_of(clients)  # type: ignore[arg-type]
        return Address("10.42.2.4"), 2049  # the harness's mount target
    if kind is StorageKind.LUSTRE:
        return Address("10.42.3.5"), 988  # the harness's MGS; LNet over TCP
    # Azure Files: the account admits the head and node subnets through their service endpoint.
    account = p.one(":StorageAccount").inputs["networkRuleSet"]
    allowed = {rule["virtualNetworkResourceId"] for rule in account["virtualNetworkRules"]}
    assert allowed == {"/mock/azure-native:network:Subnet/net-head",
                       "/mock/azure-native:network:Subnet/net-nodes"}  # fmt: skip
    for subnet in p.of_type(":Subnet"):
        if subnet.name in ("net-head", "net-nodes"):
            assert subnet.inputs["serviceEndpoints"] == [{"service": "Microsoft.Storage"}]
    return AZURE_FILES_ENDPOINT, 2049


@pytest.mark.parametrize("name", CLUSTERS)
def test_the_head_and_every_node_reach_the_shared_storage(name):
    spec, p, g = built(name)
    address, port = storage_endpoint(spec, p)
    failures = [
        failure
        for machine in [head(g), *nodes(g)]
        for failure in refused(g, machine, address, "Tcp", [port])
    ]
    assert not failures, failures


@pytest.mark.parametrize("name", CLUSTERS)
def test_nothing_else_from_the_internet_reaches_any_machine(name):
    """From an admin address, only SSH to the head; from any other internet address, nothing;
    every protocol, every port, every machine."""
    spec, _, g = built(name)
    admins = [Address(ipaddress.ip_network(cidr)[0]) for cidr in spec.admin_cidrs]
    opened = [
        (source, destination, protocol, port)
        for source in [*admins, STRANGER]
        for destination in [head(g), *nodes(g)]
        for protocol in ("Tcp", "Udp", "Icmp")
        for port in g.boundary_ports()
        if g.allows(Flow(source, destination, protocol, port))
    ]
    assert opened == [(a, head(g), "Tcp", 22) for a in admins]


def test_the_internet_reaches_ssh_on_the_head_only_with_the_explicit_flag():
    p = program(cluster(adminCidrs=["0.0.0.0/0"], allowSshFromInternet=True))
    g = graph(p)
    assert g.allows(Flow(STRANGER, head(g), "Tcp", 22))
    assert not g.allows(Flow(STRANGER, nodes(g)[0], "Tcp", 22))
    assert not g.allows(Flow(STRANGER, head(g), "Tcp", 23))


# The evaluator itself, on rules written here: each would pass a check that ignored Azure's order.


def one_subnet(rules: list[dict[str, Any]]) -> Graph:
    net = ipaddress.IPv4Network("10.0.0.0/24")
    return Graph((ipaddress.IPv4Network("10.0.0.0/16"),), (Subnet("s", net, parse_rules(rules)),))


def rule(name: str, priority: int, access: str, source: str, ports: str) -> dict[str, Any]:
    return {
        "name": name, "priority": priority, "direction": "Inbound", "access": access,
        "protocol": "Tcp", "sourceAddressPrefix": source, "sourcePortRange": "*",
        "destinationAddressPrefix": "*", "destinationPortRange": ports,
    }  # fmt: skip


def test_a_deny_in_a_subnets_nsg_stops_traffic_inside_that_subnet():
    g = one_subnet([rule("deny-ssh", 4096, "Deny", "*", "22")])
    a, b = Address("10.0.0.4"), Address("10.0.0.5")
    assert not g.allows(Flow(a, b, "Tcp", 22))  # before AllowVNetInBound (65000)
    assert g.allows(Flow(a, b, "Tcp", 80))  # AllowVNetInBound
    assert not g.allows(Flow(STRANGER, b, "Tcp", 80))  # DenyAllInBound


def test_the_lowest_priority_number_decides_not_the_order_written():
    g = one_subnet([rule("deny", 300, "Deny", "*", "22"), rule("allow", 200, "Allow", "*", "22")])
    assert g.allows(Flow(STRANGER, Address("10.0.0.4"), "Tcp", 22))
    g = one_subnet([rule("allow", 300, "Allow", "*", "22"), rule("deny", 200, "Deny", "*", "22")])
    assert not g.allows(Flow(STRANGER, Address("10.0.0.4"), "Tcp", 22))


def test_a_rule_the_check_cannot_model_is_refused_not_ignored():
    with pytest.raises(ValueError, match="does not model"):
        parse_rules([{**rule("r", 100, "Allow", "*", "22"), "sourcePortRange": "1024-65535"}])
    with pytest.raises(ValueError, match="service tag"):
        one_subnet([rule("r", 100, "Allow", "Storage", "22")]).allows(
            Flow(STRANGER, Address("10.0.0.4"), "Tcp", 22)
        )


@pytest.mark.parametrize("name", CLUSTERS)
def test_every_machine_reaches_the_internet_by_an_explicit_path(name):
    """Packages at boot (apt, pip) need the internet; Azure's implicit default outbound access
    is retired for new subnets (off by default from network API 2025-07-01)."""
    spec, p, g = built(name)
    expected = {"head-nic": OWN_PUBLIC_IP, "gpu-vmss": NAT}
    if spec.storage.kind is StorageKind.LUSTRE:
        expected["storage-lustre"] = NAT
    assert egress(p) == expected
    for source in (head(g), *nodes(g)):
        assert refused(g, source, STRANGER, "Tcp", (80, 443)) == []


@pytest.mark.parametrize("name", CLUSTERS)
def test_no_subnet_with_machines_leaves_default_outbound_access_to_azures_default(name):
    _, p, _ = built(name)
    access = {d.name: d.inputs.get("defaultOutboundAccess") for d in p.of_type(":Subnet")}
    access.pop("net-netapp", None)  # only the volume's NFS endpoint, which goes nowhere
    assert set(access.values()) == {False}
