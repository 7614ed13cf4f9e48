package amqp

import (
	"fmt"
	"time"
)

// TypeName names the field-table type of a decoded value as RabbitMQ does
// in its error messages ("longstr", "signedint", "table", "void", …).
func TypeName(v any) string {
	switch v.(type) {
	case bool:
		return "bool"
	case int8:
		return "byte"
	case uint8:
		return "unsignedbyte"
	case int16:
		return "short"
	case uint16:
		return "unsignedshort"
	case int32:
		return "signedint"
	case uint32:
		return "unsignedint"
	case int64, int:
		return "long"
	case float32:
		return "float"
	case float64:
		return "double"
	case Decimal:
		return "decimal"
	case string:
		return "longstr"
	case []byte:
		return "binary"
	case time.Time:
		return "timestamp"
	case []any:
		return "array"
	case Table, map[string]any:
		return "table"
	case nil:
		return "void"
	}
	return fmt.Sprintf("%T", v)
}
