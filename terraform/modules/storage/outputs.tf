output "bucket" {
  description = "Bucket name."
  value       = aws_s3_bucket.models.bucket
}

output "bucket_arn" {
  description = "Bucket ARN."
  value       = aws_s3_bucket.models.arn
}
