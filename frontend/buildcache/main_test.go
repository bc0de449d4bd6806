package buildcache_test

import (
	"testing"

	"github.com/steadkit/stead/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
