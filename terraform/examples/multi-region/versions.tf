terraform {
  required_version = ">= 1.6"
  required_providers {
    helm = {
      source  = "hashicorp/helm"
      version = ">= 2.12, < 3.0"
    }
    kubernetes = {
      source  = "hashicorp/kubernetes"
      version = ">= 2.25"
    }
    random = {
      source  = "hashicorp/random"
      version = ">= 3.5"
    }
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0"
    }
  }
}

# One kubernetes + helm provider pair per region, each on its own kubeconfig context.
provider "kubernetes" {
  alias          = "us"
  config_path    = var.kubeconfig_path
  config_context = var.clusters["us"].kube_context
}

provider "helm" {
  alias = "us"
  kubernetes {
    config_path    = var.kubeconfig_path
    config_context = var.clusters["us"].kube_context
  }
}

provider "kubernetes" {
  alias          = "eu"
  config_path    = var.kubeconfig_path
  config_context = var.clusters["eu"].kube_context
}

provider "helm" {
  alias = "eu"
  kubernetes {
    config_path    = var.kubeconfig_path
    config_context = var.clusters["eu"].kube_context
  }
}

provider "kubernetes" {
  alias          = "ap"
  config_path    = var.kubeconfig_path
  config_context = var.clusters["ap"].kube_context
}

provider "helm" {
  alias = "ap"
  kubernetes {
    config_path    = var.kubeconfig_path
    config_context = var.clusters["ap"].kube_context
  }
}

provider "aws" {
  region = var.dns.aws_region
}
