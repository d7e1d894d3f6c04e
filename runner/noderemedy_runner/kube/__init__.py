"""The runner's one Kubernetes layer.

Every API call of the runner goes through here (the collection's modules have their own layer,
``plugins/module_utils/_kube.py``, because it ships with them):

=============== ===========================================================================
``client``      the ApiClient from a kubeconfig or the pod's service account, and
                :func:`~noderemedy_runner.kube.client.api`: an API class whose every call has
                a timeout and raises :class:`~noderemedy_runner.kube.errors.KubeError`
``errors``      one error type, classified once: API refusals and transport failures alike
``retry``       jittered exponential back-off for the errors worth retrying (amazon.aws's
                ``AWSRetry`` shape), honouring ``Retry-After``
``events``      one core/v1 Event recorder (medik8s ``[remediation]`` messages)
``informer``    one list-then-watch loop (raw JSON), relisting after errors and 410 Gone
``configmaps``  one namespace's ConfigMaps kept by a watch (the fence configurations)
``resources``   typed access for the reconcilers: custom resources, Nodes, ConfigMaps,
                status writes with resourceVersion conflicts
``leases``      leader election and the per-node remediation Leases
=============== ===========================================================================
"""
