# `terraform test` (no providers needed): the fleet's wiring the multi-region example connects.

variables {
  clusters = {
    us = { cluster_id = "us-east-1", region = "us-east", model_namespace = "models" }
    eu = { cluster_id = "eu-west-1", region = "eu-west", inference_pool = "llama", cost_per_gpu_hour = 3.1 }
    ap = { cluster_id = "ap-south-1", region = "ap-south", capacity_type = "spot" }
  }
  router_cluster          = "us"
  router_capacity_address = "internal-capacity-123.elb.us-east-1.amazonaws.com:50051"
  agent_token_sha256 = {
    us = "1111111111111111111111111111111111111111111111111111111111111111"
    eu = "2222222222222222222222222222222222222222222222222222222222222222"
    ap = "3333333333333333333333333333333333333333333333333333333333333333"
  }
  router_capacity_dns_name = "capacity.llm.example.com"
  capacity_tls_issuer      = "fleetgate-ca"
  gateway_urls = {
    us = "http://gw-us.elb.us-east-1.amazonaws.com:8080"
    eu = "http://gw-eu.elb.eu-west-1.amazonaws.com:8080"
    ap = "http://10.30.0.7:8080"
  }
  gateway_secrets = {
    us = "us-router-to-gateway-secret-0123456789abcdef"
    eu = "eu-router-to-gateway-secret-0123456789abcdef"
    ap = "ap-router-to-gateway-secret-0123456789abcdef"
  }
}

run "one_namespace_per_cluster_shared_by_router_and_gateway" {
  command = plan

  assert {
    condition     = alltrue([for k in ["us", "eu", "ap"] : output.namespaces[k] == tolist(["fleetgate"])]) && length(output.namespaces) == 3
    error_message = "the router and the us gateway must share one namespace owner"
  }
  assert {
    condition     = output.router_namespace == "fleetgate"
    error_message = "router namespace defaults to the gateways' namespace"
  }
}

run "separate_router_namespace_is_created_once_in_the_router_cluster" {
  command = plan

  variables {
    router_namespace = "fleetgate-router"
  }

  assert {
    condition     = output.namespaces["us"] == tolist(["fleetgate", "fleetgate-router"]) && output.namespaces["eu"] == tolist(["fleetgate"])
    error_message = "router namespace must be added to the router's cluster only"
  }
}

run "gateways_discover_in_the_model_namespace_and_report_to_the_router" {
  command = plan

  assert {
    condition     = output.gateways["us"].discovery.namespace == "models" && output.gateways["ap"].discovery.namespace == "default"
    error_message = "model_namespace not wired into discovery"
  }
  assert {
    condition     = output.gateways["eu"].discovery.inference_pool == "llama" && length(output.gateways["eu"].discovery.match_labels) == 0
    error_message = "an InferencePool replaces the label selector"
  }
  assert {
    condition     = output.gateways["us"].discovery.match_labels == tomap({ app = "vllm" })
    error_message = "default selector lost"
  }
  assert {
    condition     = output.router_link.address == "capacity.llm.example.com:50051" && output.router_link.tls
    error_message = "agents must dial the capacity certificate's name, at the router module's capacity port, over TLS"
  }
  assert {
    condition     = output.gateways["ap"].capacity.capacity_type == "spot" && output.gateways["eu"].capacity.cost_per_gpu_hour == 3.1
    error_message = "capacity facts not wired"
  }
}

run "without_a_certificate_name_agents_dial_the_load_balancer" {
  command = plan

  variables {
    router_capacity_dns_name = null
    capacity_tls_issuer      = ""
  }

  assert {
    condition     = output.router_link.address == "internal-capacity-123.elb.us-east-1.amazonaws.com:50051" && output.router_link.tls
    error_message = "router link must carry the router module's capacity address, TLS on by default"
  }
  assert {
    condition     = output.router_capacity_tls.enabled && output.router_capacity_tls.cert_manager_issuer == "" && length(output.router_capacity_tls.dns_names) == 0
    error_message = "capacity TLS stays on (from a Secret provided otherwise) without an issuer"
  }
}

run "the_router_gets_tls_pinned_gateway_urls_and_per_cluster_secrets" {
  command = plan

  assert {
    condition     = output.router_capacity_tls.enabled && output.router_capacity_tls.cert_manager_issuer == "fleetgate-ca" && output.router_capacity_tls.dns_names == tolist(["capacity.llm.example.com"])
    error_message = "the capacity certificate must be issued for the name agents dial"
  }
  assert {
    condition     = length(output.router_gateway_urls) == 3 && output.router_gateway_urls["eu-west-1"][0] == "http://gw-eu.elb.eu-west-1.amazonaws.com:8080" && output.router_gateway_urls["ap-south-1"][0] == "http://10.30.0.7:8080" && length(flatten(values(output.router_gateway_urls))) == 3
    error_message = "each agent must be pinned to its own gateway's URL, keyed by cluster id"
  }
  assert {
    condition     = nonsensitive(output.router_gateway_secrets["eu-west-1"] == "eu-router-to-gateway-secret-0123456789abcdef" && length(output.router_gateway_secrets) == 3)
    error_message = "each cluster's gateway secret must reach the router under its cluster id"
  }
  assert {
    condition     = nonsensitive(length(distinct(values(output.router_gateway_secrets)))) == 3
    error_message = "each cluster has its own secret"
  }
}

run "rejects_a_cluster_without_a_gateway_secret" {
  command = plan

  variables {
    gateway_secrets = {
      us = "us-router-to-gateway-secret-0123456789abcdef"
      eu = "eu-router-to-gateway-secret-0123456789abcdef"
    }
  }

  expect_failures = [output.router_gateway_secrets]
}

run "rejects_a_short_gateway_secret" {
  command = plan

  variables {
    gateway_secrets = {
      us = "short"
      eu = "eu-router-to-gateway-secret-0123456789abcdef"
      ap = "ap-router-to-gateway-secret-0123456789abcdef"
    }
  }

  expect_failures = [var.gateway_secrets]
}

run "rejects_an_unpinned_gateway" {
  command = plan

  variables {
    gateway_urls = {
      us = "http://gw-us.elb.us-east-1.amazonaws.com:8080"
      eu = "http://gw-eu.elb.eu-west-1.amazonaws.com:8080"
    }
  }

  expect_failures = [output.router_gateway_urls]
}

run "rejects_a_gateway_url_with_user_info" {
  command = plan

  variables {
    gateway_urls = {
      us = "http://gw-us.elb.us-east-1.amazonaws.com:8080"
      eu = "http://user:pass@gw-eu.elb.eu-west-1.amazonaws.com:8080"
      ap = "http://10.30.0.7:8080"
    }
  }

  expect_failures = [output.router_gateway_urls]
}

run "rejects_a_certificate_issuer_without_the_name_agents_dial" {
  command = plan

  variables {
    router_capacity_dns_name = null
  }

  expect_failures = [output.router_capacity_tls]
}

run "rejects_a_url_as_certificate_name" {
  command = plan

  variables {
    router_capacity_dns_name = "https://capacity.llm.example.com"
  }

  expect_failures = [var.router_capacity_dns_name]
}

run "agents_are_keyed_by_cluster_id" {
  command = plan

  assert {
    condition     = output.agents["eu-west-1"] == "2222222222222222222222222222222222222222222222222222222222222222" && length(output.agents) == 3
    error_message = "agents must map cluster_id -> token hash"
  }
}

run "no_router_link_before_the_address_is_known" {
  command = plan

  variables {
    router_capacity_address = null
  }

  assert {
    condition     = output.router_link == null
    error_message = "router_link must be null without an address"
  }
}

run "rejects_duplicate_cluster_ids" {
  command = plan

  variables {
    clusters = {
      us = { cluster_id = "c1", region = "us" }
      eu = { cluster_id = "c1", region = "eu" }
    }
    agent_token_sha256 = {}
    gateway_urls       = {}
    gateway_secrets    = {}
  }

  expect_failures = [var.clusters]
}

run "rejects_raw_tokens" {
  command = plan

  variables {
    agent_token_sha256 = { us = "plain-token" }
  }

  expect_failures = [var.agent_token_sha256]
}

run "rejects_a_router_cluster_outside_the_fleet" {
  command = plan

  variables {
    router_cluster = "sa"
  }

  expect_failures = [output.gateways]
}

run "rejects_a_url_as_capacity_address" {
  command = plan

  variables {
    router_capacity_address = "http://router:50051"
  }

  expect_failures = [var.router_capacity_address]
}

run "rejects_a_cluster_local_capacity_address_for_a_multi_cluster_fleet" {
  command = plan

  variables {
    router_capacity_address  = "fleetgate-router-capacity.fleetgate.svc:50051"
    router_capacity_dns_name = null
    capacity_tls_issuer      = ""
  }

  expect_failures = [output.router_link]
}
