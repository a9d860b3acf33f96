package fleet

import (
	"reflect"
	"testing"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// Every counter of dispatcher.Stats is in the fleet's total, including
// counters added to Stats later.
func TestAddStats_SumsEveryCounter(t *testing.T) {
	var one dispatcher.Stats
	v := reflect.ValueOf(&one).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Int64 {
			f.SetInt(1)
		}
	}
	one.BreakerOpen = true
	sum := reflect.ValueOf(addStats(addStats(dispatcher.Stats{}, one), one))
	for i := range sum.NumField() {
		name := sum.Type().Field(i).Name
		switch f := sum.Field(i); f.Kind() {
		case reflect.Int64:
			if f.Int() != 2 {
				t.Errorf("Total.%s = %d after two databases with 1 each, want 2", name, f.Int())
			}
		case reflect.Bool:
			if !f.Bool() {
				t.Errorf("Total.%s = false after two databases with true, want true", name)
			}
		}
	}
}
