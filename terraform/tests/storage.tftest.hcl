# modules/storage: the model repository bucket is private, versioned, encrypted, TLS-only.

mock_provider "aws" {
  source = "./tests/mocks"
}

run "bucket" {
  command = apply
  module {
    source = "./modules/storage"
  }
  variables {
    bucket_name = "fnserve-models-123456789012"
  }

  assert {
    condition     = aws_s3_bucket_versioning.models.versioning_configuration[0].status == "Enabled"
    error_message = "the bucket is versioned"
  }
  assert {
    condition = (
      one(aws_s3_bucket_server_side_encryption_configuration.models.rule).apply_server_side_encryption_by_default[0].sse_algorithm == "AES256"
    )
    error_message = "objects are encrypted at rest (SSE-S3 by default)"
  }
  assert {
    condition = (
      aws_s3_bucket_public_access_block.models.block_public_acls &&
      aws_s3_bucket_public_access_block.models.block_public_policy &&
      aws_s3_bucket_public_access_block.models.ignore_public_acls &&
      aws_s3_bucket_public_access_block.models.restrict_public_buckets
    )
    error_message = "all four public access blocks are on"
  }
  assert {
    condition     = aws_s3_bucket_ownership_controls.models.rule[0].object_ownership == "BucketOwnerEnforced"
    error_message = "ACLs are disabled"
  }
  assert {
    condition = (
      jsondecode(aws_s3_bucket_policy.tls_only.policy).Statement[0].Effect == "Deny" &&
      jsondecode(aws_s3_bucket_policy.tls_only.policy).Statement[0].Condition.Bool["aws:SecureTransport"] == "false"
    )
    error_message = "requests without TLS are denied"
  }
  assert {
    condition     = !aws_s3_bucket.models.force_destroy
    error_message = "a bucket holding models is not deleted by default"
  }
}

run "bucket_with_kms" {
  command = apply
  module {
    source = "./modules/storage"
  }
  variables {
    bucket_name = "fnserve-models-123456789012"
    kms_key_arn = "arn:aws:kms:us-east-1:123456789012:key/0123"
  }
  assert {
    condition = (
      one(aws_s3_bucket_server_side_encryption_configuration.models.rule).apply_server_side_encryption_by_default[0].sse_algorithm == "aws:kms"
    )
    error_message = "a KMS key switches the bucket to SSE-KMS"
  }
}
