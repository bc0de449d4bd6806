package cli

// The bucket URL schemes a bytes tier (bytes=<bucket URL> on a sqlite:// or
// postgres:// store URL; docs/decisions/0027-bytes-tier.md) may name in the
// stead binary, beside file:// and mem://, which every build has: s3://
// (AWS S3 and S3-compatible servers), gs:// (Google Cloud Storage) and
// azblob:// (Azure Blob Storage), each with gocloud.dev's URL parameters
// and its cloud's usual credentials.
import (
	_ "gocloud.dev/blob/azureblob"
	_ "gocloud.dev/blob/gcsblob"
	_ "gocloud.dev/blob/s3blob"
)
