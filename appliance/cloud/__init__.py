"""Cloud Data: a coordinator's own S3 or GCS bucket, which worker browsers read and write through presigned URLs."""
