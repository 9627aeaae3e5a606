#!/usr/bin/env python3
"""Reference chat renderings from Python jinja2 configured like transformers'
apply_chat_template (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
raise_exception, tojson = json.dumps(ensure_ascii=False)). Independent of the Go code.
Run: python3 gen_chat.py > chat_local.jsonl
Lines: {"family","template","bos_token","eos_token","messages","add_generation_prompt",
"rendered"} or "error": "<exception text>" when the template raises.
"""
import json
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.ext import loopcontrols

def raise_exception(msg):
    raise ValueError(msg)

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception

T = {}
T["chatml"] = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}", "<s>", "<|im_end|>")
T["llama2"] = ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}", "<s>", "</s>")
T["llama3"] = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}", "<|begin_of_text|>", "<|eot_id|>")
T["zephyr"] = ("{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}", "<s>", "</s>")
T["stress"] = ("""{#- a comment -#}
{%- set ns = namespace(sys='', n=0, found=false) -%}
{%- if messages and messages[0].role == 'system' -%}
    {%- set ns.sys = messages[0].content | trim -%}
    {%- set rest = messages[1:] -%}
{%- else -%}
    {%- set rest = messages -%}
{%- endif -%}
{{ bos_token }}
{%- if ns.sys %}[SYS {{ ns.sys | length }}] {{ ns.sys | upper }}
{% endif %}
    {% for m in rest if m.role != 'tool' %}
        {% set ns.n = ns.n + 1 %}
        {% if loop.first %}<first>{% elif loop.last %}<last>{% else %}<mid {{ loop.index }}/{{ loop.length }}>{% endif %}
{{ m['role'] ~ ': ' ~ m.content.strip() ~ (' (q)' if m.content.endswith('?') else '') }}
        {% if 'secret' in m.content.lower() %}{% set ns.found = true %}{% endif %}
    {% endfor %}
{{- '\\n' + (ns.n | string) + ' ' + ns.found | string -}}
{{ {'role': 'meta', 'n': ns.n, "x": [1, 2.5, none, true, "é\\"\\n"]} | tojson }}
{{ messages | map(attribute='role') | join(',') }}|{{ messages[-1].content[:5] }}|{{ (messages | selectattr('role', 'equalto', 'user') | list | length) }}
{%+ if add_generation_prompt %}  <gen>{{ eos_token | default('none') }}{% endif %}
{{ undefined_var | default('dflt') }}{{ '%d' if false else 'ok' }} {{ 7 // 2 }} {{ -7 % 3 }} {{ 1 / 4 }} {{ messages|length > 2 and 'long' or 'short' }}
""", "<BOS>", "<EOS>")

CONVS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": " Hello there. "}, {"role": "user", "content": "Tell me a secret?"}],
    [{"role": "system", "content": "  Be brief.\n"}, {"role": "user", "content": "你好 😀"}, {"role": "assistant", "content": "func main() {\n\tfmt.Println(\"x\")\n}"}, {"role": "user", "content": "and now?"}],
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    [{"role": "user", "content": "  spaced  \n\n"}, {"role": "tool", "content": "{\"k\": 1}"}, {"role": "assistant", "content": "done"}],
]

for fam, (tmpl, bos, eos) in T.items():
    for msgs in CONVS:
        for agp in (False, True):
            rec = {"family": fam, "template": tmpl, "bos_token": bos, "eos_token": eos, "messages": msgs, "add_generation_prompt": agp}
            try:
                rec["rendered"] = env.from_string(tmpl).render(messages=msgs, add_generation_prompt=agp, bos_token=bos, eos_token=eos, tools=None, documents=None)
            except Exception as e:
                rec["error"] = str(e)
            print(json.dumps(rec, ensure_ascii=False))
