import subprocess
import sys

import pytest

from agentenv import AutoParser, HermesParser, JSONParser, OpenAIParser, ParseError, ToolCall, tool_call_text


def test_hermes_reads_qwen_style_calls_with_surrounding_text():
    text = 'Let me add.\n<tool_call>\n{"name": "add", "arguments": {"amount": 2}}\n</tool_call>\n' + tool_call_text(
        "submit"
    )
    assert HermesParser().parse(text) == [ToolCall(name="add", arguments={"amount": 2}), ToolCall(name="submit")]


def test_hermes_accepts_a_call_cut_at_the_stop_string_and_string_arguments():
    assert HermesParser().parse('<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}') == [
        ToolCall(name="f", arguments={"x": 1})
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<tool_call>{oops}</tool_call>", "invalid JSON"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'missing "name"'),
        ('<tool_call>{"name": "f", "args": {}}</tool_call>', "unexpected keys"),
        ('<tool_call>{"name": "f", "arguments": 3}</tool_call>', '"arguments" must be an object'),
        ('<tool_call>["f"]</tool_call>', "expected a JSON object"),
        ('{"name": "f"}</tool_call>', "without a matching"),
        ("<tool_call>{}</tool_call>" * 17, "at most 16"),
    ],
)
def test_hermes_errors_say_what_is_wrong(text, message):
    with pytest.raises(ParseError, match=message):
        HermesParser().parse(text)


def test_json_parser_reads_bare_and_fenced_objects_and_lists():
    p = JSONParser()
    assert p.parse('{"name": "f", "arguments": {"a": 1}}') == [ToolCall(name="f", arguments={"a": 1})]
    assert p.parse('```json\n{"name": "f"}\n```') == [ToolCall(name="f")]
    assert len(p.parse('[{"name": "f"}, {"name": "g"}]')) == 2
    assert p.parse("plain words") == []
    assert p.parse('```\n  {"name": "f"}  \n```') == [ToolCall(name="f")]
    assert p.parse('```json{"name": "f"}```') == [ToolCall(name="f")]
    assert p.parse("``````") == []


@pytest.mark.parametrize("tail", ["x", "\n" * 3 + "ok"])
def test_json_parser_reads_a_fence_left_open_in_one_pass(tail):
    """A reply that opens a fence and never closes it (a model repeating whitespace) is
    plain text. A backtracking pattern took minutes at 4,000 characters and hours at the
    size limit, stalling the step; here the child has a minute for 32,000 characters."""
    code = (
        "from agentenv import JSONParser, AutoParser\n"
        f"text = '```' + ' ' * 32000 + {tail!r}\n"
        "assert JSONParser().parse(text) == [] and AutoParser().parse(text) == []\n"
    )
    done = subprocess.run([sys.executable, "-c", code], timeout=60, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_openai_parser_reads_structured_tool_calls():
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": [1]}'}}],
    }
    assert OpenAIParser().parse(message) == [ToolCall(name="f", arguments={"a": [1]}, id="call_1")]
    with pytest.raises(ParseError, match="tool_calls\\[0\\]"):
        OpenAIParser().parse({"tool_calls": [{"type": "function"}]})


@pytest.mark.parametrize(
    ("parser", "text"),
    [
        (HermesParser(), tool_call_text("guess", number=9)),
        (JSONParser(), '{"name": "guess", "arguments": {"number": 9}}'),
    ],
    ids=["hermes", "json"],
)
def test_a_text_parser_refuses_a_message_whose_tool_calls_it_cannot_read(parser, text):
    # Reading the text alone would run one call while the transcript records another.
    message = {
        "role": "assistant",
        "content": text,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "guess", "arguments": '{"number": 1}'}}],
    }
    with pytest.raises(ParseError, match="not its tool_calls; use OpenAIParser"):
        parser.parse(message)
    assert parser.parse({**message, "tool_calls": []}) == [ToolCall(name="guess", arguments={"number": 9})]


def test_auto_parser_picks_by_shape():
    p = AutoParser()
    assert p.parse(ToolCall(name="f")) == [ToolCall(name="f")]
    assert p.parse(tool_call_text("f", x=1)) == [ToolCall(name="f", arguments={"x": 1})]
    assert p.parse('{"name": "f"}') == [ToolCall(name="f")]
    assert p.parse({"role": "assistant", "content": tool_call_text("g")}) == [ToolCall(name="g")]
    assert p.parse("no call here") == []
    with pytest.raises(ParseError, match="expected text"):
        p.parse(3.5)


def test_tool_call_text_round_trips_unicode():
    assert HermesParser().parse(tool_call_text("say", text='héllo "quoted" 你好')) == [
        ToolCall(name="say", arguments={"text": 'héllo "quoted" 你好'})
    ]


def test_parse_error_is_in_the_error_hierarchy_and_still_importable_from_parsers():
    from agentenv import AgentEnvError
    from agentenv.core import errors, parsers

    assert parsers.ParseError is errors.ParseError is ParseError
    assert issubclass(ParseError, AgentEnvError) and issubclass(ParseError, ValueError)
