"""Network security groups evaluated the way Azure does, over the mock resource graph.

Azure's rules (learn.microsoft.com/azure/virtual-network/network-security-group-how-it-works and
network-security-groups-overview, "Default security rules"):

- a flow is checked against the source's outbound rules and the destination's inbound rules:
  inbound, the subnet's NSG and then the NIC's; outbound, the NIC's and then the subnet's. Both
  must allow it. "This includes intra-subnet traffic as well": two machines of one subnet pass
  through that subnet's NSG;
- within one NSG, rules are tried by priority, lowest number first; the first that matches
  decides, and no later rule is looked at;
- after the NSG's own rules come the default rules, which cannot be removed: inbound
  AllowVNetInBound (65000), AllowAzureLoadBalancerInBound (65001), DenyAllInBound (65500);
  outbound AllowVnetOutBound (65000), AllowInternetOutBound (65001), DenyAllOutBound (65500).

Service tags: VirtualNetwork is the VNet's address space (no peerings here), AzureLoadBalancer
is 168.63.129.16, Internet is what lies outside the VNet. A rule this module does not model
(source port ranges, application security groups, another tag) raises, so nothing is accepted
by not being understood.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from tests.infra.harness import Program

Address = ipaddress.IPv4Address
AZURE_LOAD_BALANCER = Address("168.63.129.16")
ANY = ("*", "any")
MAX_PORT = 65535


@dataclass(frozen=True)
class Rule:
    name: str
    priority: int
    direction: str  # "Inbound" or "Outbound"
    access: str  # "Allow" or "Deny"
    protocol: str  # "Tcp", "Udp", "Icmp", "*"
    sources: tuple[str, ...]
    destinations: tuple[str, ...]
    ports: tuple[tuple[int, int], ...]  # destination port ranges, inclusive


def _range(spec: str) -> tuple[int, int]:
    if spec in ANY:
        return (0, MAX_PORT)
    low, _, high = spec.partition("-")
    return (int(low), int(high or low))


DEFAULT_RULES = (
    Rule("AllowVNetInBound", 65000, "Inbound", "Allow", "*", ("VirtualNetwork",),
         ("VirtualNetwork",), ((0, MAX_PORT),)),
    Rule("AllowAzureLoadBalancerInBound", 65001, "Inbound", "Allow", "*", ("AzureLoadBalancer",),
         ("*",), ((0, MAX_PORT),)),
    Rule("DenyAllInBound", 65500, "Inbound", "Deny", "*", ("*",), ("*",), ((0, MAX_PORT),)),
    Rule("AllowVnetOutBound", 65000, "Outbound", "Allow", "*", ("VirtualNetwork",),
         ("VirtualNetwork",), ((0, MAX_PORT),)),
    Rule("AllowInternetOutBound", 65001, "Outbound", "Allow", "*", ("*",), ("Internet",),
         ((0, MAX_PORT),)),
    Rule("DenyAllOutBound", 65500, "Outbound", "Deny", "*", ("*",), ("*",), ((0, MAX_PORT),)),
)  # fmt: skip


def _several(rule: dict[str, Any], one: str, many: str) -> tuple[str, ...]:
    values = rule.get(many) or ([rule[one]] if rule.get(one) is not None else [])
    if not values:
        raise ValueError(f"rule {rule.get('name')} has neither {one} nor {many}")
    return tuple(values)


def parse_rules(security_rules: list[dict[str, Any]]) -> tuple[Rule, ...]:
    """An NSG's securityRules input (camelCase, as the engine receives it) as Rules."""
    rules = []
    for raw in security_rules:
        unmodelled = {
            "sourceApplicationSecurityGroups", "destinationApplicationSecurityGroups",
        } & {key for key, value in raw.items() if value}  # fmt: skip
        source_ports = raw.get("sourcePortRanges") or [raw.get("sourcePortRange", "*")]
        if unmodelled or source_ports != ["*"]:
            raise ValueError(f"rule {raw['name']} uses what this check does not model: {raw}")
        rules.append(
            Rule(
                raw["name"],
                int(raw["priority"]),
                raw["direction"],
                raw["access"],
                raw["protocol"],
                _several(raw, "sourceAddressPrefix", "sourceAddressPrefixes"),
                _several(raw, "destinationAddressPrefix", "destinationAddressPrefixes"),
                tuple(
                    _range(spec)
                    for spec in _several(raw, "destinationPortRange", "destinationPortRanges")
                ),
            )
        )
    priorities = [(rule.direction, rule.priority) for rule in rules]
    if len(set(priorities)) != len(priorities):
        raise ValueError(f"two rules share a priority in one direction: {priorities}")
    return tuple(rules)


@dataclass(frozen=True)
class Flow:
    source: Address
    destination: Address
    protocol: str  # "Tcp", "Udp" or "Icmp"
    port: int


@dataclass(frozen=True)
class Subnet:
    name: str
    prefix: ipaddress.IPv4Network
    rules: tuple[Rule, ...] | None  # None: no NSG on the subnet


@dataclass(frozen=True)
class Graph:
    vnet: tuple[ipaddress.IPv4Network, ...]
    subnets: tuple[Subnet, ...]

    def subnet_of(self, address: Address) -> Subnet | None:
        return next((s for s in self.subnets if address in s.prefix), None)

    def address(self, subnet: str, host: int) -> Address:
        """The host-th address of a subnet (Azure keeps .0-.3 for itself: hosts start at 4)."""
        prefix = next(s.prefix for s in self.subnets if s.name == subnet)
        return prefix.network_address + host

    def in_vnet(self, address: Address) -> bool:
        return any(address in block for block in self.vnet)

    def matches(self, prefix: str, address: Address) -> bool:
        if prefix.lower() in ANY:
            return True
        if prefix == "VirtualNetwork":
            return self.in_vnet(address)
        if prefix == "Internet":
            return not self.in_vnet(address) and address != AZURE_LOAD_BALANCER
        if prefix == "AzureLoadBalancer":
            return address == AZURE_LOAD_BALANCER
        if prefix[0].isdigit():
            return address in ipaddress.ip_network(prefix, strict=False)
        raise ValueError(f"a service tag this check does not model: {prefix}")

    def decide(self, rules: tuple[Rule, ...], direction: str, flow: Flow) -> Rule:
        """The rule that decides a flow in one NSG: the first match by priority."""
        ordered = sorted(
            (r for r in (*rules, *DEFAULT_RULES) if r.direction == direction),
            key=lambda r: r.priority,
        )
        for rule in ordered:
            if (
                (rule.protocol.lower() in ANY or rule.protocol.lower() == flow.protocol.lower())
                and any(self.matches(p, flow.source) for p in rule.sources)
                and any(self.matches(p, flow.destination) for p in rule.destinations)
                and any(low <= flow.port <= high for low, high in rule.ports)
            ):
                return rule
        raise AssertionError("the default rules match every flow")

    def deciding(self, flow: Flow) -> list[Rule]:
        """The rules that decided a flow: the source subnet's outbound, then the destination
        subnet's inbound, where those subnets have an NSG. Addresses outside the VNet have none."""
        rules = []
        source, destination = self.subnet_of(flow.source), self.subnet_of(flow.destination)
        if source is not None and source.rules is not None:
            rules.append(self.decide(source.rules, "Outbound", flow))
        if destination is not None and destination.rules is not None:
            rules.append(self.decide(destination.rules, "Inbound", flow))
        return rules

    def allows(self, flow: Flow) -> bool:
        return all(rule.access == "Allow" for rule in self.deciding(flow))

    def boundary_ports(self) -> list[int]:
        """Every port where some rule's decision can change, with its neighbours: a flow's
        verdict is the same for all ports between two of these, so checking these checks all."""
        ports = {1, MAX_PORT}
        for subnet in self.subnets:
            for rule in (*(subnet.rules or ()), *DEFAULT_RULES):
                for low, high in rule.ports:
                    ports.update({low - 1, low, high, high + 1})
        return sorted(port for port in ports if 1 <= port <= MAX_PORT)


def graph(p: Program) -> Graph:
    """The VNet, its subnets and their NSGs, from the declared resources. NSGs on NICs are not
    modelled, so a NIC that carries one fails here."""
    [vnet] = p.of_type(":VirtualNetwork")
    nsgs = {d.name: d.inputs.get("securityRules", []) for d in p.of_type(":NetworkSecurityGroup")}
    subnets = []
    for subnet in p.of_type(":Subnet"):
        nsg = subnet.inputs.get("networkSecurityGroup")
        rules = parse_rules(nsgs[nsg["id"].rsplit("/", 1)[1]]) if nsg else None
        subnets.append(
            Subnet(
                subnet.name.removeprefix("net-"),
                ipaddress.IPv4Network(subnet.inputs["addressPrefix"]),
                rules,
            )
        )
    for nic in p.of_type(":NetworkInterface"):
        assert not nic.inputs.get("networkSecurityGroup"), "NIC NSGs are not modelled"
    for vmss in p.of_type(":VirtualMachineScaleSet"):
        profile = vmss.inputs["virtualMachineProfile"]["networkProfile"]
        for config in profile["networkInterfaceConfigurations"]:
            assert not config.get("networkSecurityGroup"), "NIC NSGs are not modelled"
    space = vnet.inputs["addressSpace"]["addressPrefixes"]
    return Graph(tuple(ipaddress.IPv4Network(block) for block in space), tuple(subnets))


# How a machine reaches the internet (learn.microsoft.com/azure/virtual-network/ip-services/
# default-outbound-access): through the subnet's NAT gateway (which takes precedence), else its
# NIC's own public IP, else Azure's implicit default outbound access, which subnets may turn off
# (defaultOutboundAccess false) and which is off by default from network API 2025-07-01.
NAT = "NAT gateway"
OWN_PUBLIC_IP = "its own public IP"
IMPLICIT = "default outbound access (implicit, being retired)"
NO_WAY_OUT = "no way out"


def _nat_with_address(p: Program, nat_id: str) -> bool:
    found = [d for d in p.of_type(":NatGateway") if nat_id.endswith("/" + d.name)]
    return bool(found and found[0].inputs.get("publicIpAddresses"))


def _machines(p: Program) -> list[tuple[str, str, bool]]:
    """(machine, its subnet's resource name, whether its NIC has its own public IP)."""
    found = []
    for nic in p.of_type(":NetworkInterface"):
        for config in nic.inputs["ipConfigurations"]:
            own = bool(config.get("publicIPAddress"))
            found.append((nic.name, config["subnet"]["id"].rsplit("/", 1)[1], own))
    for vmss in p.of_type(":VirtualMachineScaleSet"):
        profile = vmss.inputs["virtualMachineProfile"]["networkProfile"]
        for config in profile["networkInterfaceConfigurations"]:
            for ip in config["ipConfigurations"]:
                own = bool(ip.get("publicIPAddressConfiguration"))
                found.append((vmss.name, ip["subnet"]["id"].rsplit("/", 1)[1], own))
    for lustre in p.of_type(":AmlFilesystem"):
        found.append((lustre.name, lustre.inputs["filesystemSubnet"].rsplit("/", 1)[1], False))
    return found


def egress(p: Program) -> dict[str, str]:
    """Each machine's way to the internet, by the subnet it is in: the head VM's NIC, the scale
    set's NIC configuration and, with Lustre, the file system's servers (which reach the
    AzureCloud service tag from their subnet)."""
    subnets = {d.name: d.inputs for d in p.of_type(":Subnet")}
    ways = {}
    for machine, subnet_name, own in _machines(p):
        subnet = subnets[subnet_name]
        nat = subnet.get("natGateway")
        if nat and _nat_with_address(p, nat["id"]):
            ways[machine] = NAT
        elif own:
            ways[machine] = OWN_PUBLIC_IP
        elif subnet.get("defaultOutboundAccess") is False:
            ways[machine] = NO_WAY_OUT
        else:
            ways[machine] = IMPLICIT
    return ways
