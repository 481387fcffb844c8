# The whole example planned and applied against mock providers (Terraform >= 1.7): needs the
# helm, kubernetes, random and aws provider schemas, so it runs only where `terraform init` can
# install them (tests/deploy/test_terraform_example.py skips it otherwise, saying why).

mock_provider "kubernetes" {
  alias = "us"
}
mock_provider "kubernetes" {
  alias = "eu"
}
mock_provider "kubernetes" {
  alias = "ap"
}
mock_provider "helm" {
  alias = "us"
}
mock_provider "helm" {
  alias = "eu"
}
mock_provider "helm" {
  alias = "ap"
}
mock_provider "random" {}
mock_provider "aws" {}

variables {
  clusters = {
    us = { kube_context = "us", cluster_id = "us-east-1", region = "us-east", model_namespace = "models" }
    eu = { kube_context = "eu", cluster_id = "eu-west-1", region = "eu-west" }
    ap = { kube_context = "ap", cluster_id = "ap-south-1", region = "ap-south", capacity_type = "spot" }
  }
  dns = { zone_id = "Z0123456789", name = "llm.example.com", aws_region = "us-east-1" }
}

override_data {
  target = module.router.data.kubernetes_service_v1.capacity
  values = { status = [{ load_balancer = [{ ingress = [{ hostname = "capacity.elb.us-east-1.amazonaws.com", ip = "" }] }] }] }
}

override_data {
  target = module.router.data.kubernetes_service_v1.http
  values = { status = [{ load_balancer = [{ ingress = [{ hostname = "router.elb.us-east-1.amazonaws.com", ip = "" }] }] }] }
}

override_resource {
  target = module.gateway_us.kubernetes_service_v1.public
  values = { status = [{ load_balancer = [{ ingress = [{ hostname = "gw.elb.us-east-1.amazonaws.com", ip = "" }] }] }] }
}

override_resource {
  target = module.gateway_eu.kubernetes_service_v1.public
  values = { status = [{ load_balancer = [{ ingress = [{ hostname = "gw.elb.eu-west-1.amazonaws.com", ip = "" }] }] }] }
}

override_resource {
  target = module.gateway_ap.kubernetes_service_v1.public
  values = { status = [{ load_balancer = [{ ingress = [{ hostname = "", ip = "10.30.0.7" }] }] }] }
}

run "apply_wires_every_address_from_module_outputs" {
  command = apply

  assert {
    condition     = output.capacity_address == "capacity.elb.us-east-1.amazonaws.com:50051"
    error_message = "agents must report to the router's capacity load balancer"
  }
  assert {
    condition     = output.gateways.eu.public_url == "http://gw.elb.eu-west-1.amazonaws.com:8080" && output.gateways.ap.public_url == "http://10.30.0.7:8080"
    error_message = "each gateway's publicUrl must be its own load balancer"
  }
  assert {
    condition     = module.gateway_eu.gateway_spec.globalRouter.address == output.capacity_address && module.gateway_ap.gateway_spec.globalRouter.address == output.capacity_address
    error_message = "the eu agent must dial the router's capacity address"
  }
  assert {
    condition     = module.gateway_us.gateway_spec.discovery.kubernetes.namespace == "models" && module.gateway_eu.gateway_spec.discovery.kubernetes.namespace == "default"
    error_message = "model_namespace must reach discovery"
  }
  assert {
    condition     = length(kubernetes_namespace_v1.us) == 1 && length(kubernetes_namespace_v1.eu) == 1 && length(kubernetes_namespace_v1.ap) == 1
    error_message = "exactly one namespace per cluster"
  }
  assert {
    condition     = !module.gateway_us.helm_waits && !module.gateway_eu.helm_waits && !module.gateway_ap.helm_waits
    error_message = "gateway installs must not wait for model pods"
  }
}
