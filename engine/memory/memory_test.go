package memory_test

import (
	"testing"

	"github.com/steadkit/stead/engine/enginetest/faultengine"

	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/enginetest"
	"github.com/steadkit/stead/engine/memory"
)

func TestConformance(t *testing.T) {
	enginetest.Run(t, enginetest.Harness{
		New: func(t *testing.T) engine.Engine {
			e := memory.New()
			t.Cleanup(func() { e.Close() })
			return e
		},
		Faulty: func(t *testing.T, fail func(string) error) engine.Engine {
			e := faultengine.New(memory.New(), faultengine.Func(func(op faultengine.Op) error { return fail(string(op)) }))
			t.Cleanup(func() { e.Close() })
			return e
		},
	})
}
