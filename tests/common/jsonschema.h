/*
 * jsonschema.h -- a small JSON Schema (draft 2020-12 subset) validator for
 * tests: the schemas in schemas/ are checked against sample and encoder
 * output with it.
 *
 * Owns: nothing between calls (schemas are loaded per call).  Thread: any.
 * Supported keywords: type (a name or an array of names, "integer"
 * included), properties, required, additionalProperties (false or a
 * schema), enum, const, items, minItems, maxItems, minimum, maximum,
 * exclusiveMinimum, minLength, maxLength (in code points), pattern
 * (POSIX ERE, unanchored as in JSON Schema), $ref ("#/$defs/x" and
 * "common.json#/$defs/x"), oneOf, anyOf.  Annotations ($schema, $id,
 * title, description, x-*) are ignored.  An unknown keyword is an
 * error, so a schema cannot silently rely on something the validator
 * does not check.
 */
#ifndef FLY_TEST_JSONSCHEMA_H
#define FLY_TEST_JSONSCHEMA_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* Validate @p doc against the schema file @p schema_path (absolute, or
 * relative to FLY_SRC_DIR "/schemas/").
 * @param[out] err  on failure, a message naming the JSON path (may be
 *                  NULL).
 * @return 0 valid, 1 invalid, -1 when the schema cannot be loaded or uses
 *         an unsupported keyword. */
int fly_test_schema_validate(const char *schema_path, const cJSON *doc,
			     char *err, size_t errcap);

/* The same for JSON text; @p schema_name is a file in schemas/
 * ("decide.response.json").  Unparsable text is invalid (1). */
int fly_test_schema_validate_text(const char *schema_name, const char *json,
				  char *err, size_t cap);

#endif /* FLY_TEST_JSONSCHEMA_H */
