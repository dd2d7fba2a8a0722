"""Pieces the head VM and the scale set share: the image, the SSH-keys-only Linux settings."""

from __future__ import annotations

import base64
from dataclasses import dataclass

import pulumi
from pulumi_azure_native import compute

from dtrun.azure.catalog import Image
from dtrun.spec.cluster import ClusterSpec


@dataclass(frozen=True)
class MachineArgs:
    """What the head VM and the GPU scale set are made from."""

    cluster: ClusterSpec
    resource_group_name: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    admin_public_key: pulumi.Input[str]
    custom_data: pulumi.Input[str]  # base64 cloud-init, secret
    tags: dict[str, str]
    identity_id: pulumi.Input[str] | None = None  # the head's user-assigned identity (expiry)


def image_reference(urn: str) -> compute.ImageReferenceArgs:
    image = Image.parse(urn)
    return compute.ImageReferenceArgs(
        publisher=image.publisher, offer=image.offer, sku=image.sku, version=image.version
    )


def linux_keys_only(user: str, public_key: pulumi.Input[str]) -> compute.LinuxConfigurationArgs:
    return compute.LinuxConfigurationArgs(
        disable_password_authentication=True,
        ssh=compute.SshConfigurationArgs(
            public_keys=[
                compute.SshPublicKeyArgs(
                    path=f"/home/{user}/.ssh/authorized_keys", key_data=public_key
                )
            ]
        ),
    )


def custom_data(cloud_init: pulumi.Output[str]) -> pulumi.Output[str]:
    """Base64 cloud-init, a Pulumi secret in the stack's state. It carries private keys (the
    machine's host key; on the nodes the cluster key; with Slurm the munge key), which Azure
    advises against ("Don't store sensitive data in custom data": Microsoft Learn, custom-data):
    custom data is kept in the VM's model, readable in the VM at /var/lib/waagent/ovf-env.xml
    (root) and to anyone who may read the VM's model in Azure. dtrun accepts that because every
    key is scoped to this cluster and anyone who can read the model can already run commands
    on the VM. Better: Key Vault, or a VM extension's protected settings (docs/security.md)."""
    return pulumi.Output.secret(
        cloud_init.apply(lambda text: base64.b64encode(text.encode()).decode())
    )
