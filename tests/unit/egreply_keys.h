/*  Keys for test_gw_egreply, made once with openssl genpkey: test data only. The public
    ones are as EG passes them, the base64 of a DER SubjectPublicKeyInfo. */
static const char s_private_pem [] =
    "-----BEGIN PRIVATE KEY-----\n"
    "MIICdgIBADANBgkqhkiG9w0BAQEFAASCAmAwggJcAgEAAoGBANMZ+KFf1cytumDV\n"
    "PSltP7HoaYQaut6oi59Yr2FC41yiWJB59mw4+sMQfqGZKmC2FhSZYMPSTIyUv6uX\n"
    "3To1857zMvGexHVbslXrhTJbJ8acU9eG7pxGt7NL8DWyPjyphqmZ/5iX6MU4kwod\n"
    "z7G+AQh5IX7bnY9GzBNGFhamdV4jAgMBAAECgYBPAdlcDFIoWJz4wNYzOwArxaA4\n"
    "IQjvbIVVDgwVisMtWFVtPThNKMYxW2sJcBm8OGnrK7xbjcm4k7NotV3G+4pBtR6b\n"
    "yTw1Iyup0H/sbAi+KTX8WpGP4aK/Os7eLQHdoOIDUmbX95RLW3WOJPRURoCWi8rr\n"
    "ZQzd1/UBTHsr78gNAQJBAOrSqYUCBMIc75vaY6LrgrANIRqYjWixHLu+h/vqaojN\n"
    "N8h+dfIh5iGQGYJRXCjyggSB5Xyq603IDV5crX/soGkCQQDmI6dfJSZLbC8TnXru\n"
    "dES8zpYwEtFha/GZkMVNHxtos7kUB0oTB3eOkZ5WVShhknr4iE/k9PK+NFq41guv\n"
    "7XirAkEAs6IPl/YhWbT0/w6jZcAvqymAB25nzoyeZGiuceGzOY9zeuZyp5WTDF3F\n"
    "hdFjZNeO6o/L1ACUHF5LC8Jt3wxO8QJABF5Q4wF1hKD9E8Y9eyFB3MOfHjJ9Pvgp\n"
    "kdypohkhEA+5R6QLx+iwYEhrVQAw0AlTxDvyKEpuASZFQpTti91aGQJAGDTMUtPe\n"
    "tRb3HYANAviRMCdTDi/aJVI9TRDWvpVv9m8VwhieJWtyNMyCv3tdjfdqowWBXkD6\n"
    "JH7+mo2rRf/H3A==\n"
    "-----END PRIVATE KEY-----\n";
static const char s_public_1024 [] =
    "MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQDTGfihX9XMrbpg1T0pbT+x6GmEGrreqIuf"
    "WK9hQuNcoliQefZsOPrDEH6hmSpgthYUmWDD0kyMlL+rl906NfOe8zLxnsR1W7JV64UyWyfG"
    "nFPXhu6cRrezS/A1sj48qYapmf+Yl+jFOJMKHc+xvgEIeSF+252PRswTRhYWpnVeIwIDAQAB";
static const char s_public_2048 [] =
    "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA9/MUGuaELH8I9fDrZ4/RaSZ9B56O"
    "+ckfqmqwz/GyA8XHN+kIEwP4xWNmruJBlYim/raeW/JapoF4yZm5CGrkV4t1abcqxP4Luddd"
    "e/a7q9M3ZauGHnDR2yrw4/skd1MwNuX3VALMjQRr4OJAT8dPXGhgpqdsu7a1tmwy8zVEXnvK"
    "ediwbD/yLhgKP92TTOyZS6KZU7ZAukQEyW9fa1vwjbLxpq7Aafjl6VGBlzVS4PmK+VH3Y7Cq"
    "PqC8PcGWStVfdkDnYUFsApnwWdU+7tyoLhwUeX3OOfc5orQQnGeVdcUxblQPeA6Di+66SrOk"
    "6MrG9lDl0L6nnEQS26mYKa6oNQIDAQAB";
static const char s_public_512 [] =
    "MFwwDQYJKoZIhvcNAQEBBQADSwAwSAJBALYtT+n9NVmEjFUyDcAjfV/MbhphLFiS2EtftvVX"
    "xEJcOjnfMv4J+iAs/6ml8XG3rBJWZgNX3fVWsiqF+vQ6YTkCAwEAAQ==";
static const char s_public_ec [] =
    "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEB7TfdmeocryAUrZMLyKM2lDyXeRmwJiXMVMt"
    "8s2zYp5eVqzC18vjEdHMs2iGnB4qcATY+8BRpFlbhuLJKRrgpA==";
//  s_public_1024 with its modulus mutated (found by fuzz_gw_egreply): DER that parses, an
//  RSA key that cannot encrypt.
static const char s_public_bad_modulus [] =
    "MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQDTGfihX9XMrbpg1T0pbT+x6GmEGrreqIuf"
    "WK9hQuNcoliQefZsOPrDEH6hmSpgthYUmWDD0kyMlL+rl906NfOe8zLxnSR1W7JV64UyWyfG"
    "nFPXhu6cRrezS/A1sj48qYapmf+Yl+jFOJMKHc+xvgEI/yLhgKP92TTOyZS6KZU7ZAIDAQAB";
