"""Deployment assets (Helm charts, kind scripts, ArgoCD) and the CRD generator (`python -m deploy.gen_crd`)."""
