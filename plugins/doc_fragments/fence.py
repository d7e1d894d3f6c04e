# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the fencing modules' options: one attribute a group of options, each 1:1 with
its argspec. A fencing module extends its device's group, ``noderemedy.core.fence.<group>``
(Ansible upper-cases the name after the dot), and ``noderemedy.core.fence`` (``DOCUMENTATION``).

* ``DOCUMENTATION``: what ``plugins/module_utils/_fence_module.py`` ``fencing_module`` gives every
  module it makes - the timing options, ``_fence.py`` ``FENCE_ARG_SPEC`` (fence-agents names and
  meanings), and ``credentials_secret``, ``_secret.py`` ``CREDENTIALS_SECRET_ARGSPEC`` - and the
  attributes those modules share: check mode (``fencing_module`` turns it on), diff mode (each
  returns a diff) and posix. A module adds the attributes' ``details``.
* ``IPMI``: ``_ipmi.py`` ``IPMI_ARG_SPEC`` (fence_ipmilan names).
* ``REDFISH``: ``_redfish.py`` ``REDFISH_ARG_SPEC`` (fence_redfish names).
* ``VMWARE``: ``_vmware.py`` ``VMWARE_ARG_SPEC`` (fence_vmware_soap names).
* ``AWS``: ``_aws.py`` ``AWS_ARG_SPEC`` (fence_aws names).
* ``SNMP``: ``_snmp.py`` ``SNMP_ARG_SPEC`` (fence-agents ``fencing_snmp`` names), for ``pdu_outlet``
  and ``fc_port``.
* ``KDUMP``: ``_kdump.py`` ``KDUMP_ARG_SPEC`` (fence_kdump names), for ``kdump_wait`` alone: it is
  not made by ``fencing_module`` and does not extend ``DOCUMENTATION``.
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  power_timeout:
    description:
      - Seconds to wait, after the switch command, for the device to read back the wanted state
        (fence-agents C(--power-timeout)). Not reaching it is a failure, never a success.
      - For an IPMI BMC that does not answer at all, the login also gives up after this many seconds.
    type: float
    default: 20
  power_wait:
    description:
      - Seconds to sleep after the switch command before the first read-back (fence-agents
        C(--power-wait)). C(fence_ipmilan) defaults to 2; the read-back is polled here, so 0 is safe
        for devices that report their state truthfully.
    type: float
    default: 0
  retry_on:
    description:
      - Extra attempts of switching on (fence-agents C(--retry-on)). O(state=on) is tried
        1 + O(retry_on) times, the power-on half of a reboot O(retry_on) times (at least once).
    type: int
    default: 1
  poll_interval:
    description:
      - Seconds between read-backs while verifying (fence-agents polls once a second). At most 1.
    type: float
    default: 0.1
  credentials_secret:
    description:
      - Read the device credentials from this Kubernetes Secret instead of task options. The module
        reads the Secret itself, so the values never appear in a task result, an extra variable or
        a log; every value read is masked in what the module returns.
      - Secret keys - IPMI, Redfish and vSphere C(username), C(password); AWS C(access_key), C(secret_key); SNMP v1/v2c C(community); SNMPv3 C(username),
        C(password) (authentication key) and C(priv_password) (privacy key). A key missing from the
        Secret is skipped; an option given to the task wins over the Secret.
      - Kubernetes access - O(credentials_secret.kubeconfig) and O(credentials_secret.context), else
        the E(K8S_AUTH_*) environment variables of the kube_auth options of
        M(noderemedy.core.secret_info), else the in-cluster service account or the default kubeconfig.
    type: dict
    suboptions:
      name:
        description: The Secret's name.
        type: str
        required: true
      namespace:
        description: The Secret's namespace.
        type: str
        required: true
      kubeconfig:
        description: Path to a kubeconfig file, or the kubeconfig itself as a dictionary.
        type: raw
      context:
        description: The kubeconfig context to use.
        type: str
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: posix
requirements:
  - kubernetes >= 37 (only with O(credentials_secret))
"""

    IPMI = r"""
options:
  ipaddr:
    description:
      - Address of the BMC (fence_ipmilan C(--ip)).
    type: str
    required: true
    aliases: [ ip ]
  ipport:
    description:
      - UDP port of the BMC's RMCP+ service.
    type: int
    default: 623
  username:
    description:
      - BMC user name (fence_ipmilan C(--username)).
      - Can also be set with the E(NODEREMEDY_IPMI_USERNAME) or E(IPMI_USERNAME) environment variable,
        or read from O(credentials_secret) (key C(username)). Required one way or another.
    type: str
    aliases: [ login ]
  password:
    description:
      - BMC password (fence_ipmilan C(--password)). Never logged or returned. An empty password is
        refused (the session would be unauthenticated).
      - Can also be set with the E(NODEREMEDY_IPMI_PASSWORD) or E(IPMI_PASSWORD) environment variable,
        or read from O(credentials_secret) (key C(password)). Required one way or another.
    type: str
    aliases: [ passwd ]
  cipher:
    description:
      - RMCP+ (IPMI 2.0 lanplus) cipher suite, as C(fence_ipmilan --cipher) / C(ipmitool -C).
      - V(3) is RAKP-HMAC-SHA1 / HMAC-SHA1-96 / AES-CBC-128; V(17) is RAKP-HMAC-SHA256 /
        HMAC-SHA256-128 / AES-CBC-128. Suite V(0) (no authentication; BMCs accept any password)
        is refused; other suites are not supported by pyghmi.
      - The session fails when the BMC negotiates anything else, or offers only IPMI 1.5.
    type: int
    default: 3
  privlvl:
    description:
      - Privilege level requested for the session (fence_ipmilan C(--privlvl)). Power control
        needs V(operator) or V(administrator); a V(user) session is refused with a privilege error.
    type: str
    default: administrator
    choices: [ callback, user, operator, administrator ]
requirements:
  - pyghmi >= 1.6.19
"""

    REDFISH = r"""
options:
  ipaddr:
    description:
      - Address or host name of the BMC (fence_redfish C(--ip)).
    type: str
    required: true
    aliases: [ ip ]
  ipport:
    description:
      - TCP port of the BMC's Redfish service. Default 443 with O(ssl=true), 80 without.
    type: int
  username:
    description:
      - BMC user name, sent with HTTP basic authentication (fence_redfish C(--username)).
      - Can also be set with the E(NODEREMEDY_REDFISH_USERNAME) or E(REDFISH_USERNAME) environment
        variable, or read from O(credentials_secret) (key C(username)). Required one way or another.
    type: str
    aliases: [ login ]
  password:
    description:
      - BMC password (fence_redfish C(--password)). Never logged or returned.
      - Can also be set with the E(NODEREMEDY_REDFISH_PASSWORD) or E(REDFISH_PASSWORD) environment
        variable, or read from O(credentials_secret) (key C(password)). Required one way or another.
    type: str
    aliases: [ passwd ]
  ssl:
    description:
      - Speak HTTPS (fence_redfish always does). V(false) for a BMC served over plain HTTP (a Metal3
        C(redfish+http://) address); credentials then cross the network in clear text.
    type: bool
    default: true
  ssl_insecure:
    description:
      - Do not verify the BMC's TLS certificate (fence-agents C(--ssl-insecure)). Prefer O(ca_path).
    type: bool
    default: false
  ca_path:
    description:
      - CA bundle file, or directory of CA certificates, that signed the BMC's certificate. Without it
        the system's trusted CAs are used.
    type: path
  redfish_uri:
    description:
      - The Redfish service root (fence_redfish C(--redfish-uri)).
    type: str
    default: /redfish/v1
  systems_uri:
    description:
      - URI of the C(ComputerSystem) to fence, for example C(/redfish/v1/Systems/System.Embedded.1)
        (fence_redfish C(--systems-uri)).
      - Without it, the member of the C(Systems) collection named by O(plug); without either, the
        collection's only member (several members are an error, never a guess).
    type: str
  plug:
    description:
      - C(Id), C(Name) or C(UUID) of the system in the C(Systems) collection (fence-agents C(--plug)),
        when O(systems_uri) is not given.
    type: str
requirements:
  - sushy >= 5
"""

    VMWARE = r"""
options:
  ipaddr:
    description:
      - Address or host name of vCenter or the ESXi host (fence_vmware_soap C(--ip)).
    type: str
    required: true
    aliases: [ ip ]
  ipport:
    description:
      - HTTPS port of the vSphere API.
    type: int
    default: 443
  username:
    description:
      - vSphere user name (fence_vmware_soap C(--username)).
      - Can also be set with E(NODEREMEDY_VMWARE_USERNAME) or E(VMWARE_USER), or read from
        O(credentials_secret) (key C(username)). Required one way or another.
    type: str
    aliases: [ login ]
  password:
    description:
      - vSphere password (fence_vmware_soap C(--password)). Never logged or returned.
      - Can also be set with E(NODEREMEDY_VMWARE_PASSWORD) or E(VMWARE_PASSWORD), or read from
        O(credentials_secret) (key C(password)). Required one way or another.
    type: str
    aliases: [ passwd ]
  ssl_insecure:
    description:
      - Do not verify the server's TLS certificate (fence-agents C(--ssl-insecure)). Prefer O(ca_path).
    type: bool
    default: false
  ca_path:
    description:
      - CA file, or directory of CA certificates, that signed the server's certificate. Without it
        the system's trusted CAs are used.
    type: path
  plug:
    description:
      - The VM's name, BIOS UUID or instance UUID (fence_vmware_soap C(--plug)). Several VMs with
        that name are an error; give the UUID then.
    type: str
    required: true
    aliases: [ vm ]
requirements:
  - pyvmomi >= 8
"""

    AWS = r"""
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

    SNMP = r"""
options:
  ipaddr:
    description:
      - Address of the SNMP agent (the PDU or switch).
    type: str
    required: true
    aliases: [ ip ]
  ipport:
    description:
      - UDP port of the SNMP agent (fence-agents C(--ipport)).
    type: int
    default: 161
  snmp_version:
    description:
      - SNMP version. fence_apc_snmp and fence_eaton_snmp default to V(1), fence_ifmib to V(2c).
    type: str
    choices: [ '1', '2c', '3' ]
    default: 2c
  community:
    description:
      - Community for SNMP v1/v2c; it needs write access. Never logged or returned.
      - A wrong community is indistinguishable from a device that does not answer (agents drop
        such requests); the error says so.
      - Can also be set with the E(NODEREMEDY_SNMP_COMMUNITY) environment variable.
    type: str
  username:
    description:
      - SNMPv3 user name (fence-agents C(--username)).
      - Can also be set with the E(NODEREMEDY_SNMP_USERNAME) environment variable.
    type: str
    aliases: [ login ]
  password:
    description:
      - SNMPv3 authentication passphrase, 8 characters or more (fence-agents C(--password)).
      - Can also be set with the E(NODEREMEDY_SNMP_PASSWORD) environment variable.
    type: str
    aliases: [ passwd ]
  snmp_sec_level:
    description:
      - SNMPv3 security level. Default from the keys given - V(authPriv) with O(snmp_priv_passwd),
        V(authNoPriv) with O(password) only, else V(noAuthNoPriv).
    type: str
    choices: [ noAuthNoPriv, authNoPriv, authPriv ]
  snmp_auth_prot:
    description:
      - SNMPv3 authentication protocol.
    type: str
    choices: [ MD5, SHA, SHA224, SHA256, SHA384, SHA512 ]
    default: SHA
  snmp_priv_prot:
    description:
      - SNMPv3 privacy protocol.
    type: str
    choices: [ DES, AES, AES192, AES256 ]
    default: AES
  snmp_priv_passwd:
    description:
      - SNMPv3 privacy passphrase, 8 characters or more.
      - Can also be set with the E(NODEREMEDY_SNMP_PRIV_PASSWD) environment variable.
    type: str
  snmp_timeout:
    description:
      - Seconds to wait for each SNMP answer.
    type: float
    default: 1
  snmp_retries:
    description:
      - Retransmissions of an unanswered SNMP request.
    type: int
    default: 1
requirements:
  - pysnmp >= 7.1
"""

    KDUMP = r"""
options:
  nodename:
    description:
      - Host names or addresses of the node (fence_kdump C(--nodename)). Only messages sent from
        one of their addresses count; every other datagram is ignored.
    type: list
    elements: str
    required: true
  ipport:
    description:
      - UDP port to listen on (fence_kdump C(--ipport)); the node's C(fence_kdump_send -p) must match.
    type: int
    default: 7410
  family:
    description:
      - IP family (fence_kdump C(--family)). V(auto) follows the node's addresses.
    type: str
    default: auto
    choices: [ auto, ipv4, ipv6 ]
  listen_address:
    description:
      - Address to bind. Default every address of the family.
    type: str
  timeout:
    description:
      - Seconds to wait for the node's message (fence_kdump C(--timeout)). Waiting in vain is not a
        failure - RV(fence.verified) is false and the next fence method (power) runs.
    type: float
    default: 60
"""
