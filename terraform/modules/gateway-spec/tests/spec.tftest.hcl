# `terraform test` (no providers needed): the spec this module builds is what the chart expects.

run "selector_discovery_with_router" {
  command = plan

  variables {
    cluster_id            = "us-east-1"
    region                = "us-east"
    public_url            = "http://gw.us-east.internal:8080"
    discovery             = { match_labels = { app = "vllm" } }
    global_router_address = "router.internal:50051"
    capacity              = { capacity_type = "spot", cost_per_gpu_hour = 1.1 }
  }

  assert {
    condition     = output.spec.discovery.kubernetes.selector.matchLabels.app == "vllm"
    error_message = "selector discovery not rendered"
  }
  assert {
    condition     = output.spec.globalRouter.address == "router.internal:50051" && output.spec.globalRouter.tokenEnv == "FLEETGATE_AGENT_TOKEN"
    error_message = "router link not rendered"
  }
  assert {
    condition     = output.spec.capacity.capacityType == "spot" && output.spec.host == "0.0.0.0"
    error_message = "capacity or bind address wrong"
  }
  assert {
    condition     = output.reports_to_router
    error_message = "reports_to_router should be true"
  }
}

run "inference_pool_standalone" {
  command = plan

  variables {
    cluster_id = "eu-west-1"
    region     = "eu-west"
    discovery  = { inference_pool = "llama-pool", namespace = "models" }
    extra_spec = { scrape = { intervalMs = 50 } }
  }

  assert {
    condition     = output.spec.discovery.kubernetes.inferencePool == "llama-pool" && !can(output.spec.discovery.kubernetes.selector)
    error_message = "InferencePool discovery not rendered"
  }
  assert {
    condition     = !can(output.spec.globalRouter) && !output.reports_to_router
    error_message = "a standalone cluster must not link to a router"
  }
  assert {
    condition     = output.spec.scrape.intervalMs == 50
    error_message = "extra_spec not merged"
  }
}

run "rejects_two_discovery_modes" {
  command = plan

  variables {
    cluster_id = "ap-south-1"
    region     = "ap-south"
    discovery  = { inference_pool = "p", match_labels = { app = "vllm" } }
  }

  expect_failures = [var.discovery]
}

run "rejects_bad_cluster_id" {
  command = plan

  variables {
    cluster_id = "Not_A_Label"
    region     = "x"
    discovery  = { match_labels = { app = "vllm" } }
  }

  expect_failures = [var.cluster_id]
}

run "public_url_from_the_load_balancer_host" {
  command = plan

  variables {
    cluster_id            = "eu-west-1"
    region                = "eu-west"
    discovery             = { match_labels = { app = "vllm" } }
    public_host           = "internal-gw-42.elb.eu-west-1.amazonaws.com"
    global_router_address = "router.internal:50051"
  }

  assert {
    condition     = output.public_url == "http://internal-gw-42.elb.eu-west-1.amazonaws.com:8080" && output.spec.publicUrl == output.public_url
    error_message = "publicUrl must be built from the load balancer host"
  }
}

run "explicit_public_url_wins_and_https_is_kept" {
  command = plan

  variables {
    cluster_id    = "eu-west-1"
    region        = "eu-west"
    discovery     = { match_labels = { app = "vllm" } }
    public_host   = "ignored.example.com"
    public_url    = "https://gw.eu.example.com"
    public_scheme = "https"
  }

  assert {
    condition     = output.spec.publicUrl == "https://gw.eu.example.com"
    error_message = "an explicit public_url must win"
  }
}

run "no_public_url_without_a_host" {
  command = plan

  variables {
    cluster_id  = "eu-west-1"
    region      = "eu-west"
    discovery   = { match_labels = { app = "vllm" } }
    public_host = ""
  }

  assert {
    condition     = output.public_url == null && !can(output.spec.publicUrl)
    error_message = "an LB without an address yet must not produce a URL"
  }
}

run "rejects_a_url_as_public_host" {
  command = plan

  variables {
    cluster_id  = "eu-west-1"
    region      = "eu-west"
    discovery   = { match_labels = { app = "vllm" } }
    public_host = "http://gw:8080"
  }

  expect_failures = [var.public_host]
}
