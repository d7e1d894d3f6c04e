# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the EC2 connection options, 1:1 with
``plugins/module_utils/_aws.py`` ``AWS_ARG_SPEC`` (fence_aws names)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  region:
    description:
      - The instance's region (fence_aws C(--region)). Without it, the region of the zone in
        O(provider_id), else E(AWS_REGION) or E(AWS_DEFAULT_REGION).
    type: str
  access_key:
    description:
      - IAM access key ID (fence_aws C(--access-key)). Give it with O(secret_key), or neither to use
        boto3's own credential chain (environment, shared configuration, instance role).
      - Can also be set with E(AWS_ACCESS_KEY_ID) or read from O(credentials_secret) (key C(access_key)).
    type: str
    aliases: [ aws_access_key_id ]
  secret_key:
    description:
      - IAM secret access key (fence_aws C(--secret-key)). Never logged or returned.
      - Can also be set with E(AWS_SECRET_ACCESS_KEY) or read from O(credentials_secret) (key C(secret_key)).
    type: str
    aliases: [ aws_secret_access_key ]
  endpoint_url:
    description:
      - An EC2-compatible endpoint, C(http(s)://host[:port]), instead of AWS's regional one.
      - Can also be set with E(AWS_ENDPOINT_URL_EC2) or E(AWS_ENDPOINT_URL).
    type: str
  plug:
    description:
      - The instance ID, C(i-...) (fence_aws C(--plug)). Give one of O(plug), O(provider_id), O(node).
    type: str
    aliases: [ instance_id ]
  provider_id:
    description:
      - The Node's C(spec.providerID), C(aws:///<zone>/<instance-id>) as the AWS cloud provider sets
        it; the instance and (without O(region)) the region come from it.
    type: str
  node:
    description:
      - Name of the Kubernetes Node to fence; the module reads its C(spec.providerID) (as
        O(provider_id)). Kubernetes access as for O(credentials_secret) - its C(kubeconfig) and
        C(context), else the E(K8S_AUTH_*) environment variables, else in-cluster or the default kubeconfig.
    type: str
requirements:
  - boto3 >= 1.26
"""
