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
mock_provider "random" {
  # the wiring refuses gateway secrets shorter than 32 characters (mock strings are shorter)
  mock_resource "random_password" {
    defaults = { result = "mock-router-to-gateway-secret-0123456789abcdef" }
  }
}
mock_provider "aws" {}

variables {
  clusters = {
    us = { kube_context = "us", cluster_id = "us-east-1", region = "us-east", model_namespace = "models" }
    eu = { kube_context = "eu", cluster_id = "eu-west-1", region = "eu-west" }
    ap = { kube_context = "ap", cluster_id = "ap-south-1", region = "ap-south", capacity_type = "spot" }
  }
  dns                    = { zone_id = "Z0123456789", name = "llm.example.com", aws_region = "us-east-1" }
  router_certificate_arn = "arn:aws:acm:us-east-1:123456789012:certificate/00000000-0000-0000-0000-000000000000"
  capacity_dns_name      = "capacity.llm.example.com"
  capacity_tls_issuer    = "fleetgate-ca"
  router_ca_secret       = "fleetgate-router-ca"
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
    condition     = module.gateway_eu.gateway_spec.globalRouter.address == "capacity.llm.example.com:50051" && module.gateway_ap.gateway_spec.globalRouter.tls
    error_message = "agents must dial the capacity certificate's name at the load balancer's port, over TLS"
  }
  assert {
    condition     = module.wiring.router_gateway_urls["eu-west-1"][0] == output.gateways.eu.public_url && module.wiring.router_gateway_urls["ap-south-1"][0] == "http://10.30.0.7:8080"
    error_message = "the router must pin each agent to its gateway's load balancer URL"
  }
  assert {
    condition     = nonsensitive(length(module.wiring.router_gateway_secrets)) == 3 && module.wiring.router_capacity_tls.dns_names == tolist(["capacity.llm.example.com"])
    error_message = "every gateway gets its HMAC secret and the capacity certificate covers the name agents dial"
  }
  assert {
    condition     = startswith(output.global_endpoint, "https://") && aws_route53_health_check.router.type == "HTTPS"
    error_message = "clients reach the router over HTTPS"
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
