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
