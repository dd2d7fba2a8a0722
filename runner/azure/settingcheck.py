"""Each stack setting's own check (docs/azure.md, "Settings"): a value that cannot make a working,
safe cluster is a ConfigError naming the setting and what to set instead."""

from __future__ import annotations

import ipaddress
import math
import re

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_ssh_public_key
from packaging.requirements import InvalidRequirement, Requirement

from dtrun.errors import UsageError
from dtrun.spec.text import CONTROL, escaped, one_line

NAMESPACE = "dtrun"


# Azure's InfiniBand (RDMA) network uses this range: a VNet overlapping it breaks IB
# (docs/facts.md §3).
RDMA_NETWORK = ipaddress.ip_network("172.16.0.0/16")


# Narrower than these, an admin range is a network; wider, it is "the internet" (0.0.0.0/1 ...).
WIDEST_ADMIN_PREFIX = {4: 8, 6: 16}


# Azure's disallowed adminUsername values: OSProfile.adminUsername, "Disallowed values", in the
# Azure SDK reference (learn.microsoft.com, .../arm-workloads/osprofile; checked 2026-12-06, all
# 32). Azure refuses them only when it creates the head VM, after the group, network and storage.
RESERVED_USERS = frozenset({
    "1", "123", "a", "actuser", "adm", "admin", "admin1", "admin2", "administrator", "aspnet",
    "backup", "console", "david", "guest", "john", "owner", "root", "server", "sql", "support",
    "support_388945a0", "sys", "test", "test1", "test2", "test3", "user", "user1", "user2",
    "user3", "user4", "user5",
})  # fmt: skip


# Accounts the machines already have: Ubuntu 22.04's own, and Slurm's and munge's, which
# dtrun-slurm makes. The admin user would be merged into one, or Slurm's user into it.
SYSTEM_USERS = frozenset({
    "_apt", "bin", "daemon", "fwupd-refresh", "games", "gnats", "irc", "landscape", "list", "lp",
    "lxd", "mail", "man", "messagebus", "munge", "news", "nobody", "pollinate", "proxy", "slurm",
    "sshd", "sync", "syslog", "tcpdump", "tss", "usbmux", "uucp", "uuidd", "www-data",
})  # fmt: skip


_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}\Z")


_PREFIX = re.compile(r"[a-z][a-z0-9]{1,11}\Z")


_LOCATION = re.compile(r"[a-z][a-z0-9]+\Z")


_MOUNT_PATH = re.compile(r"(/[A-Za-z0-9._-]+)+\Z")


# What each machine needs of its own disk at boot and after: the share mounted on one of these,
# or on a folder above one, would hide it (the boot scripts, sshd's and Slurm's settings, the
# logs, the admin's authorized_keys: "/home/{user}/.ssh" is added with the user's name).
_OWN_PATHS = (
    "/bin", "/boot", "/dev", "/etc/dtrun", "/etc/fstab", "/etc/munge", "/etc/slurm", "/etc/ssh",
    "/lib", "/lib64", "/opt", "/proc", "/root", "/run/dtrun", "/sbin", "/snap", "/sys", "/tmp",
    "/usr/bin", "/usr/lib", "/usr/local/sbin", "/usr/sbin", "/var/lib", "/var/log",
    "/var/spool/slurmctld",
)  # fmt: skip


# What Azure accepts as a Linux VM's SSH key: RSA of 2048 bits or more, and ed25519 (docs/azure.md
# "Settings"); ECDSA, DSA and RSA under 2048 bits are refused when the VM is created.
MIN_RSA_BITS = 2048


class ConfigError(UsageError):
    """A stack setting that cannot make a working, safe cluster."""


def setting_error(key: str, what: str, fix: str) -> ConfigError:
    return ConfigError(f"{NAMESPACE}:{key} {what}", fix=fix)


def admin_cidrs(cidrs: list[str], allow_internet: bool) -> tuple[str, ...]:
    if not cidrs:
        raise setting_error(
            "adminCidrs",
            "is empty, so nobody could reach the cluster",
            "pulumi config set --path 'adminCidrs[0]' YOUR.PUBLIC.IP/32",
        )
    networks = []
    for cidr in cidrs:
        try:
            network = ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            raise setting_error(
                "adminCidrs", f"holds {cidr!r}, which is not a CIDR", "use e.g. 203.0.113.4/32"
            ) from None
        if str(network) != cidr and network.prefixlen != network.max_prefixlen:
            raise setting_error(
                "adminCidrs",
                f"holds {cidr!r}, which has host bits set",
                f"did you mean {network}?",
            )
        if network.prefixlen < WIDEST_ADMIN_PREFIX[network.version] and not allow_internet:
            raise setting_error(
                "adminCidrs",
                f"holds {cidr}, which opens SSH to the whole internet or a large part of it",
                "use your own address (e.g. 203.0.113.4/32), or set "
                "dtrun:allowSshFromInternet true if you really mean it",
            )
        networks.append(str(network))
    return tuple(networks)


def vnet_cidr(cidr: str) -> str:
    try:
        network = ipaddress.ip_network(cidr)
    except ValueError:
        raise setting_error(
            "vnetCidr", f"is {cidr!r}, not an IPv4 network", "use e.g. 10.42.0.0/16"
        ) from None
    if not isinstance(network, ipaddress.IPv4Network) or network.prefixlen > 22:
        raise setting_error(
            "vnetCidr",
            f"is {cidr}; it needs four /24 subnets (head, nodes, NetApp, Lustre)",
            "use an IPv4 network of /22 or larger, e.g. 10.42.0.0/16",
        )
    if network.overlaps(RDMA_NETWORK):
        raise setting_error(
            "vnetCidr",
            f"{cidr} overlaps 172.16.0.0/16, the range Azure's InfiniBand network uses",
            "use a range outside it, e.g. 10.42.0.0/16",
        )
    special = _special_block(network)
    if special:
        raise setting_error(
            "vnetCidr",
            f"is {cidr}, which reaches {special}; Azure refuses such a virtual network",
            "use a private unicast range, e.g. 10.42.0.0/16",
        )
    return str(network)


# Azure's virtual IP for DNS, DHCP and the VM agent: Azure's "Virtual Network FAQ" (What
# address ranges can I use in my virtual networks?) lists 168.63.129.16/32 beside the
# multicast, broadcast, loopback and link-local ranges as ones a virtual network cannot hold.
PLATFORM_ADDRESS = ipaddress.IPv4Address("168.63.129.16")


def _special_block(network: ipaddress.IPv4Network) -> str | None:
    """The first multicast, loopback, link-local, reserved, "this network" (0.0.0.0/8) or
    platform-address range the network reaches, in /16 steps: the narrowest such range besides
    the platform address, link-local, is a /16."""
    blocks = network.subnets(new_prefix=16) if network.prefixlen < 16 else iter([network])
    for block in blocks:
        first = block.network_address
        kinds = {
            f"Azure's platform address {PLATFORM_ADDRESS}": PLATFORM_ADDRESS in block,
            "multicast": first.is_multicast,
            "loopback": first.is_loopback,
            "link-local": first.is_link_local,
            "reserved": first.is_reserved,
            '"this network"': block.supernet(new_prefix=8).network_address.is_unspecified,
        }
        for kind, hit in kinds.items():
            if hit:
                return f"{block} ({kind})"
    return None


def subnets(vnet: str) -> dict[str, str]:
    """The /24 subnets carved from the VNet, in a fixed order."""
    blocks = ipaddress.ip_network(vnet).subnets(new_prefix=24)
    return {name: str(next(blocks)) for name in ("head", "nodes", "netapp", "lustre")}


# A price as people write one, ASCII only, as the CLI's (runner/cli/parse.py, parse_amount):
# float() also takes 1_0, ' 5' and other scripts' digits; -1 as -1.0 too, as float() took it
_PRICE = re.compile(r"-1(?:\.0*)?|(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def check_spot_price(text: str) -> float:
    price = float(text) if _PRICE.fullmatch(text) else 0.0
    if not math.isfinite(price) or (price != -1 and price <= 0):
        raise setting_error(
            "spotMaxPrice", f"is {text!r}", "use -1 (up to on-demand) or a price in USD, e.g. 12.5"
        )
    return price


def check_admin_user(user: str) -> str:
    fix = "use lowercase letters, digits, '-' and '_', not root or admin; e.g. azureuser"
    if not _USER.match(user) or user in RESERVED_USERS:
        raise setting_error(
            "adminUser", f"is {user!r}, which Azure or Linux does not accept as a login", fix
        )
    if user in SYSTEM_USERS or user.startswith("systemd-"):
        raise setting_error(
            "adminUser", f"is {user!r}; every machine already has an account of that name", fix
        )
    return user


def check_public_key(key: str) -> str | None:
    key = key.strip()
    if not key:
        return None
    fix = "pass the contents of ~/.ssh/id_ed25519.pub, or leave it empty to generate a key"
    try:
        parsed = load_ssh_public_key(key.encode()) if "\n" not in key else None
    except (ValueError, UnsupportedAlgorithm):
        parsed = None
    if parsed is None:
        raise setting_error("sshPublicKey", "is not an OpenSSH public key line", fix)
    kind = key.split()[0]
    if isinstance(parsed, rsa.RSAPublicKey) and parsed.key_size < MIN_RSA_BITS:
        raise setting_error(
            "sshPublicKey",
            f"is a {parsed.key_size}-bit RSA key; Azure refuses RSA keys under {MIN_RSA_BITS} bits",
            "make an ed25519 key (ssh-keygen -t ed25519) and " + fix,
        )
    if not isinstance(parsed, (rsa.RSAPublicKey, ed25519.Ed25519PublicKey)):
        raise setting_error(
            "sshPublicKey",
            f"is a key of type {kind}; Azure accepts only RSA (2048 bits or more) and ed25519",
            "make an ed25519 key (ssh-keygen -t ed25519) and " + fix,
        )
    return key


def check_prefix(prefix: str) -> str:
    if not _PREFIX.match(prefix):
        raise setting_error(
            "namePrefix",
            f"is {prefix!r}",
            "use 2 to 12 lowercase letters and digits, starting with a letter",
        )
    return prefix


def check_mount_path(path: str, admin_user: str) -> str:
    """An absolute path of plain names that hides none of the machine's own files."""
    fix = "use an absolute path of plain names beside the system's folders, e.g. /shared"
    names = path.split("/")[1:]
    if not _MOUNT_PATH.match(path) or {".", ".."} & set(names):
        raise setting_error("mountPath", f"is {path!r}", fix)
    for own in (*_OWN_PATHS, f"/home/{admin_user}/.ssh"):
        if own == path or own.startswith(path + "/"):
            raise setting_error(
                "mountPath", f"is {path}, where the share would hide the machine's own {own}", fix
            )
    return path


# An Azure VM size name as the API spells them (Standard_D4s_v5, Standard_M416-208s_v2,
# Basic_A1): the head's size is no GPU size of dtrun's catalog, so only its shape is checked
_VM_SIZE = re.compile(r"(Standard|Basic)_[A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)*\Z")


def check_head_vm_size(size: str) -> str:
    if not _VM_SIZE.match(size):
        raise setting_error(
            "headVmSize", f"is {size!r}, not an Azure VM size name", "use e.g. Standard_D4s_v5"
        )
    return size


def check_location(location: str) -> str:
    if not _LOCATION.match(location):
        raise setting_error("location", f"is {location!r}", "use an Azure region name, e.g. eastus")
    return location


# Azure Resource Manager's tag limits (learn.microsoft.com, azure-resource-manager/management/
# tag-resources, "Limitations"): a name of at most 512 characters without < > % & \ ? /, a value
# of at most 256, 50 a resource, names compared without case. dtrun's own tags (infra/program.py
# build: dtrun-cluster and managed-by on every resource, three dtrun-expiry ones on the group)
# name the cluster to the user, `dtrun down` and the head's timer: none is the user's to set.
TAG_FORBIDDEN = set("<>%&\\?/")
MOST_USER_TAGS = 50 - 5
CLUSTER_TAG, MANAGED_BY_TAG = "dtrun-cluster", "managed-by"  # on every resource
OWN_TAG_PREFIX = "dtrun-"  # the cluster's tag and the expiry ones (runner/azure/expiry.py)


def cut_tag(item: str) -> str:
    """A tag as a message shows it: its first 60 characters (a value may have 256)."""
    return item if len(item) <= 60 else f"{item[:60]}..."


def check_tags(items: list[str]) -> tuple[tuple[str, str], ...]:
    tags: list[tuple[str, str]] = []
    fix = "use e.g. team=ml-infra: a name of at most 512 characters without < > % & \\ ? /"
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise setting_error("tags", f"holds {item!r}, not KEY=VALUE", "use e.g. team=ml-infra")
        control = CONTROL.search(item)
        if control:  # a newline, an escape sequence: in `az` tables, the portal, logs
            where = "name" if control.start() < len(key) else "value"
            raise setting_error(
                "tags",
                f"holds a tag whose {where} has a control character ({escaped(control[0])}): "
                f"{one_line(cut_tag(item))}",
                "write each tag on one line, as KEY=VALUE in printable characters",
            )
        if len(key) > 512 or len(value) > 256 or TAG_FORBIDDEN & set(key):
            raise setting_error("tags", f"holds {item!r}, which Azure refuses as a tag", fix)
        if key.lower() == MANAGED_BY_TAG or key.lower().startswith(OWN_TAG_PREFIX):
            raise setting_error(
                "tags", f"holds {key!r}, a tag dtrun sets itself", "name your tag otherwise"
            )
        if any(key.lower() == seen.lower() for seen, _ in tags):
            raise setting_error(
                "tags", f"names {key!r} twice (Azure ignores case)", "give each tag once"
            )
        tags.append((key, value))
    if len(tags) > MOST_USER_TAGS:
        raise setting_error(
            "tags",
            f"holds {len(tags)} tags",
            f"use at most {MOST_USER_TAGS}: Azure takes 50 a resource, and dtrun sets 5",
        )
    return tuple(tags)


def check_python_packages(items: list[str]) -> tuple[str, ...]:
    """Each entry is one argument of the nodes' `pip install` (dtrun-python-env): one starting
    with '-' would be read as an option (--index-url, -r, -e), not a package; any other must be
    a PEP 508 requirement (packaging's parser, pip's own), or pip fails at the nodes' first
    boot, with the GPUs already paid for."""
    fix = "list package names or requirement specifiers only, e.g. torch or numpy>=1.26"
    for item in items:
        if item.strip().startswith("-"):
            raise setting_error(
                "pythonPackages",
                f"holds {item!r}, which the nodes' `pip install` would read as an option",
                fix,
            )
        try:
            Requirement(item)
        except InvalidRequirement as error:
            reason = str(error).splitlines()[0]
            raise setting_error(
                "pythonPackages", f"holds {item!r}, which is no requirement: {reason}", fix
            ) from None
    return tuple(items)
