"""The machine named beside every figure and in every run record: the CPU model from /proc/cpuinfo, with the
CPU family and model numbers added when the name alone (as a virtual machine may report it) has no model
number, so two machines of one family name are told apart."""

from reluattn.machine import cpu_model

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: {family}
model\t\t: {model}
model name\t: {name}
flags\t\t: fpu vme

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 99
model\t\t: 99
model name\t: {name}
"""


def test_a_bare_family_name_gets_the_family_and_model_numbers_of_the_first_cpu(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO.format(family=25, model=17, name="AMD EPYC"))
    assert cpu_model(path) == "AMD EPYC (family 25, model 17)"


def test_a_name_with_a_model_number_is_left_as_it_is(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO.format(family=6, model=143, name="Intel(R) Xeon(R) Platinum 8480+"))
    assert cpu_model(path) == "Intel(R) Xeon(R) Platinum 8480+"


def test_without_cpuinfo_the_platform_names_the_processor(tmp_path):
    assert cpu_model(tmp_path / "missing")  # e.g. "x86_64" on a system without /proc
