"""LWS's webhook configurations, as controller-gen writes them, pointed at 127.0.0.1."""

from __future__ import annotations

import base64

from testbed.cluster import LWS_POD_SELECTOR, lws_webhook_configurations

#: The shape controller-gen writes (LWS v0.8.0's config/webhook/manifests.yaml, shortened).
GENERATED = """---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system,
              path: /mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset}
  failurePolicy: Fail
  name: mleaderworkerset.kb.io
  rules:
  - {apiGroups: [leaderworkerset.x-k8s.io], apiVersions: [v1], operations: [CREATE, UPDATE],
     resources: [leaderworkersets]}
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}
  failurePolicy: Fail
  name: mpod.kb.io
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  sideEffects: None
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /validate--v1-pod}
  failurePolicy: Fail
  name: vpod.kb.io
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  sideEffects: None
"""


def test_services_become_urls_on_127_0_0_1_with_the_ca_bundle() -> None:
    configs = lws_webhook_configurations(GENERATED, port=9443, ca_bundle=b"PEM")
    assert [c["metadata"]["name"] for c in configs] == [
        "lws-mutating-webhook-configuration", "lws-validating-webhook-configuration"]
    hooks = [h for c in configs for h in c["webhooks"]]
    assert [h["clientConfig"]["url"] for h in hooks] == [
        "https://127.0.0.1:9443/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
        "https://127.0.0.1:9443/mutate--v1-pod", "https://127.0.0.1:9443/validate--v1-pod"]
    assert all(base64.b64decode(h["clientConfig"]["caBundle"]) == b"PEM" for h in hooks)
    assert all("service" not in h["clientConfig"] for h in hooks)


def test_only_pods_of_a_leaderworkerset_reach_the_pod_webhooks() -> None:
    hooks = {h["name"]: h for c in lws_webhook_configurations(GENERATED, port=1, ca_bundle=b"")
             for h in c["webhooks"]}
    assert hooks["mpod.kb.io"]["objectSelector"] == LWS_POD_SELECTOR
    assert hooks["vpod.kb.io"]["objectSelector"] == LWS_POD_SELECTOR
    assert "objectSelector" not in hooks["mleaderworkerset.kb.io"]
